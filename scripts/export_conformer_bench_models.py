#!/usr/bin/env python3
"""Randomly initialised full-size conformer ASR models for bench/conformer_vs_onnx_asr.py, each
written twice from the same weights: (a) in a format this engine loads, (b) as ONNX in the layout
onnx-asr 0.12.0 reads from a local directory. No weights are downloaded: the architectures are
the published configs below, the weights come from a fixed seed.

  parakeet-ctc  transformers 5.24.0 ParakeetForCTC with parakeet-ctc-0.6b's published encoder
                (FastConformer 24 x 1024, 8 heads, FF 4096, conv kernel 9, dw_striding 8x with 256
                channels, 80 mels), 1024 SentencePiece-like pieces + blank.
                engine: transformers directory (config.json, model.safetensors, tokenizer.json,
                preprocessor_config.json); onnx-asr "nemo-conformer-ctc": model.onnx (audio_signal
                [B, 80, T], length [B] -> logprobs [B, T/8, 1025]), vocab.txt, config.json.
  parakeet-tdt  transformers ParakeetForTDT with parakeet-tdt-0.6b-v2's published config (same
                encoder, 128 mels; prediction network 2 x LSTM 640, joint 640, durations 0..4).
                onnx-asr "nemo-conformer-tdt": encoder-model.onnx (-> outputs [B, 1024, T/8],
                encoded_lengths) and decoder_joint-model.onnx (encoder_outputs [1, 1024, 1],
                targets, target_length, input_states_1/2 [2, 1, 640] -> outputs [1025 + 5],
                output_states_1/2), as NeMo's own export names them.
  gigaam-ctc    gigaam 0.1.0 GigaAMASR with GigaAM v2 CTC's published config (16 x 768, 16 heads,
                rotary attention, conv kernel 31, striding 4x, 64 mels; 33 letters + blank).
                engine: v2_ctc.ckpt as gigaam saves it ({"cfg", "state_dict"}); onnx-asr
                "gigaam-v2-ctc": v2_ctc.onnx written by gigaam's own GigaAMASR.to_onnx, v2_vocab.txt.

Parakeet needs /work/benchvenv (torch 2.15.0 with onnx and onnxscript, transformers 5.24.0);
GigaAM needs /work/gigaamvenv (gigaam 0.1.0, torch 2.5.1, onnx 1.17.0):
  /work/benchvenv/bin/python scripts/export_conformer_bench_models.py parakeet-ctc parakeet-tdt
  /work/gigaamvenv/bin/python scripts/export_conformer_bench_models.py gigaam-ctc
Output: $XDG_CACHE_HOME/xdna-engine/bench/conformer/<model>/{engine,onnx}/ (--out to change);
--tiny writes 2-layer models of the same kinds (a quick check of the plumbing).
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_conformer_fixtures import randomize  # noqa: E402  (every weight and norm statistic random)

CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                     "xdna-engine", "bench", "conformer")
SEED = 1234
GIGAAM_LABELS = [" "] + [chr(c) for c in range(ord("а"), ord("я") + 1) if chr(c) != "ё"]  # 33, as gigaam's
assert len(GIGAAM_LABELS) == 33


def synthetic_pieces(n):
    """n distinct SentencePiece-like pieces: <unk>, then '▁'-prefixed words and bare suffixes
    made of lowercase letters (no spaces: onnx-asr's vocab.txt is 'piece id' per line)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces, k = ["<unk>"], 0
    while len(pieces) < n:
        a, b = letters[k % 26], letters[(k // 26) % 26]
        word = a + b + letters[(k // 676) % 26] if k >= 676 else (a + b if k >= 26 else a)
        pieces.append(("\u2581" + word) if k % 2 == 0 else word)
        k += 1
    assert len(set(pieces)) == n
    return pieces


def write_vocab_txt(path, pieces, blank_id):
    with open(path, "w", encoding="utf-8") as f:
        for i, p in enumerate(pieces):
            f.write(f"{p} {i}\n")
        f.write(f"<blk> {blank_id}\n")


# ----------------------------------------------------------------------------- Parakeet

def parakeet_encoder_config(n_mels, tiny):
    from transformers import ParakeetEncoderConfig
    # parakeet-ctc-0.6b / parakeet-tdt-0.6b-v2 model_config.yaml: d_model 1024, n_layers 24,
    # n_heads 8, ff_expansion_factor 4, conv_kernel_size 9, subsampling dw_striding, factor 8,
    # subsampling_conv_channels 256, rel_pos attention, batch norm in the conv module.
    size = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                subsampling_conv_channels=32) if tiny else \
        dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=8, intermediate_size=4096,
             subsampling_conv_channels=256)
    return ParakeetEncoderConfig(
        conv_kernel_size=9, subsampling_factor=8, num_mel_bins=n_mels, dropout=0.0,
        dropout_positions=0.0, layerdrop=0.0, activation_dropout=0.0, attention_dropout=0.0,
        scale_input=True,  # NeMo's xscaling (a scalar multiply: either value costs the same)
        attention_bias=True, convolution_bias=True, **size)


def write_engine_parakeet(model, n_mels, pieces, out):
    """The transformers directory the engine's load_conformer reads."""
    from transformers import ParakeetFeatureExtractor
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, max_shard_size="100GB")
    ParakeetFeatureExtractor(feature_size=n_mels).save_pretrained(out)
    tok = {"version": "1.0", "model": {"type": "Unigram", "unk_id": 0,
                                       "vocab": [[p, 0.0] for p in pieces]}}
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


class CtcExport(torch.nn.Module):
    """NeMo's CTC export signature: (audio_signal [B, F, T], length [B]) -> logprobs [B, T', V+1]."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, audio_signal, length):
        features = audio_signal.transpose(1, 2)
        mask = torch.arange(features.shape[1], device=features.device)[None, :] < length[:, None]
        logits = self.model(input_features=features, attention_mask=mask.long()).logits
        return torch.log_softmax(logits, dim=-1)


class EncoderExport(torch.nn.Module):
    """NeMo's transducer encoder export: -> outputs [B, D, T'], encoded_lengths [B] (int64)."""

    def __init__(self, model):
        super().__init__()
        self.encoder = model.encoder

    def forward(self, audio_signal, length):
        features = audio_signal.transpose(1, 2)
        mask = torch.arange(features.shape[1], device=features.device)[None, :] < length[:, None]
        out = self.encoder(input_features=features, attention_mask=mask.long())
        return out.last_hidden_state.transpose(1, 2), out.attention_mask.sum(-1).long()


class DecoderJointExport(torch.nn.Module):
    """NeMo's decoder_joint export for one step: the prediction network on the previous token
    with its LSTM state, then the joint network against one encoder frame (the encoder and
    prediction projections live in the joint, as in NeMo)."""

    def __init__(self, model):
        super().__init__()
        self.enc_proj = model.encoder_projector
        self.decoder = model.decoder
        self.joint = model.joint

    def forward(self, encoder_outputs, targets, target_length, input_states_1, input_states_2):
        emb = self.decoder.embedding(targets.long())                       # [B, 1, H]
        out, (h, c) = self.decoder.lstm(emb, (input_states_1, input_states_2))
        pred = self.decoder.decoder_projector(out)                         # [B, 1, H]
        enc = self.enc_proj(encoder_outputs.transpose(1, 2))               # [B, 1, H]
        logits = self.joint.head(self.joint.activation(enc[:, :, None, :] + pred[:, None, :, :]))
        return logits, target_length, h, c                                 # [B, 1, 1, V+1+D]


def onnx_export(module, args, path, input_names, output_names, dynamic_axes):
    """The TorchScript exporter with external data (a 0.6B model is over protobuf's 2 GB)."""
    torch.onnx.export(module, args, path, input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes, opset_version=17, dynamo=False,
                      external_data=True, do_constant_folding=True)


def make_parakeet(kind, out_root, tiny):
    from transformers import ParakeetCTCConfig, ParakeetForCTC, ParakeetForTDT, ParakeetTDTConfig
    n_mels = 80 if kind == "ctc" else 128  # parakeet-ctc-0.6b: 80; parakeet-tdt-0.6b-v2: 128
    pieces = synthetic_pieces(1024)
    blank = len(pieces)
    enc = parakeet_encoder_config(n_mels, tiny).to_dict()
    torch.manual_seed(SEED)
    if kind == "ctc":
        model = ParakeetForCTC(ParakeetCTCConfig(encoder_config=enc, vocab_size=blank + 1,
                                                 pad_token_id=blank)).eval()
    else:
        model = ParakeetForTDT(ParakeetTDTConfig(
            encoder_config=enc, vocab_size=blank + 1, blank_token_id=blank, pad_token_id=blank,
            decoder_hidden_size=640, num_decoder_layers=2, max_symbols_per_step=10,
            durations=[0, 1, 2, 3, 4])).eval()
    randomize(model, SEED + (0 if kind == "ctc" else 1))
    if kind == "tdt":
        with torch.no_grad():  # NeMo's prediction network embeds the blank as zeros (padding_idx)
            model.decoder.embedding.weight[blank].zero_()
    name = f"parakeet-{kind}" + ("-tiny" if tiny else "")
    out = os.path.join(out_root, name)
    write_engine_parakeet(model, n_mels, pieces, os.path.join(out, "engine"))

    onnx_dir = os.path.join(out, "onnx")
    os.makedirs(onnx_dir, exist_ok=True)
    write_vocab_txt(os.path.join(onnx_dir, "vocab.txt"), pieces, blank)
    cfg = {"model_type": f"nemo-conformer-{kind}", "features_size": n_mels, "subsampling_factor": 8}
    if kind == "tdt":
        cfg["max_tokens_per_step"] = 10
    with open(os.path.join(onnx_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    x = torch.randn(1, n_mels, 300)
    length = torch.tensor([300], dtype=torch.int64)
    with torch.no_grad():
        if kind == "ctc":
            onnx_export(CtcExport(model), (x, length), os.path.join(onnx_dir, "model.onnx"),
                        ["audio_signal", "length"], ["logprobs"],
                        {"audio_signal": {0: "B", 2: "T"}, "length": {0: "B"}, "logprobs": {0: "B", 1: "T8"}})
        else:
            onnx_export(EncoderExport(model), (x, length), os.path.join(onnx_dir, "encoder-model.onnx"),
                        ["audio_signal", "length"], ["outputs", "encoded_lengths"],
                        {"audio_signal": {0: "B", 2: "T"}, "length": {0: "B"}, "outputs": {0: "B", 2: "T8"},
                         "encoded_lengths": {0: "B"}})
            d = model.config.encoder_config.hidden_size
            h = torch.zeros(2, 1, 640)
            onnx_export(DecoderJointExport(model),
                        (torch.randn(1, d, 1), torch.tensor([[blank]], dtype=torch.int32),
                         torch.tensor([1], dtype=torch.int32), h, h),
                        os.path.join(onnx_dir, "decoder_joint-model.onnx"),
                        ["encoder_outputs", "targets", "target_length", "input_states_1", "input_states_2"],
                        ["outputs", "prednet_lengths", "output_states_1", "output_states_2"], None)
    print(f"{name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters -> {out}")


# ----------------------------------------------------------------------------- GigaAM

def make_gigaam(out_root, tiny):
    from omegaconf import OmegaConf
    from gigaam.model import GigaAMASR
    # GigaAM v2_ctc's published config (its .ckpt "cfg"); the encoder's defaults in gigaam 0.1.0
    # are these same values.
    enc = {"_target_": "gigaam.encoder.ConformerEncoder", "feat_in": 64, "n_layers": 16, "d_model": 768,
           "subsampling_factor": 4, "ff_expansion_factor": 4, "self_attention_model": "rotary",
           "pos_emb_max_len": 5000, "n_heads": 16, "conv_kernel_size": 31, "flash_attn": False}
    if tiny:
        enc.update(n_layers=2, d_model=64, n_heads=4)
    cfg = OmegaConf.create({
        "model_name": "v2_ctc", "sample_rate": 16000,
        "preprocessor": {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": 16000, "features": 64},
        "encoder": enc,
        "head": {"_target_": "gigaam.decoder.CTCHead", "feat_in": enc["d_model"],
                 "num_classes": len(GIGAAM_LABELS) + 1},
        "decoding": {"_target_": "gigaam.decoding.CTCGreedyDecoding", "vocabulary": GIGAAM_LABELS},
    })
    torch.manual_seed(SEED)
    model = GigaAMASR(cfg).eval()
    randomize(model.encoder, SEED + 2)
    randomize(model.head, SEED + 3)
    name = "gigaam-ctc" + ("-tiny" if tiny else "")
    out = os.path.join(out_root, name)
    os.makedirs(os.path.join(out, "engine"), exist_ok=True)
    torch.save({"cfg": cfg, "state_dict": model.state_dict()}, os.path.join(out, "engine", "v2_ctc.ckpt"))
    onnx_dir = os.path.join(out, "onnx")
    os.makedirs(onnx_dir, exist_ok=True)
    model.to_onnx(onnx_dir)  # gigaam's own export: v2_ctc.onnx (features, feature_lengths -> log_probs)
    write_vocab_txt(os.path.join(onnx_dir, "v2_vocab.txt"),
                    ["\u2581" if c == " " else c for c in GIGAAM_LABELS], len(GIGAAM_LABELS))
    print(f"{name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters -> {out}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", choices=["parakeet-ctc", "parakeet-tdt", "gigaam-ctc"])
    p.add_argument("--out", default=CACHE)
    p.add_argument("--tiny", action="store_true", help="2-layer models (plumbing check)")
    args = p.parse_args()
    torch.set_num_threads(2)
    for m in args.models:
        if m == "gigaam-ctc":
            make_gigaam(args.out, args.tiny)
        else:
            make_parakeet(m.split("-")[1], args.out, args.tiny)


if __name__ == "__main__":
    sys.exit(main())
