#!/usr/bin/env python3
"""GigaAM v3 fixtures for tests/models/test_conformer_gigaam_v3.cpp and
tests/pipeline/test_conformer_gigaam_v3_frontend.cpp.

GigaAM v3 (salute-developers/GigaAM, commit bd77657 "GigaAM-v3 (#47)", 2025-11-20) keeps v2's
conformer and heads but adds two encoder options and three frontend options that PyPI's gigaam 0.1.0
(the only release) does not have. Its published config (v3_e2e_rnnt; v3_ctc differs only in the head):
  preprocessor: features 64, n_fft 320, win_length 320, hop_length 160, center False
  encoder:      subsampling "conv1d", subs_kernel_size 5, conv_norm_type "layer_norm",
                conv_kernel_size 5, rotary attention, 16 layers, d_model 768, 16 heads
The two encoder pieces are written here from that description (they only compose torch modules):
  Conv1dSubsampling: log2(factor) x [Conv1d(k, stride 2, padding (k - 1) / 2), ReLU] over time,
                     channels feat_in -> d_model -> d_model, no output linear
                     (state dict: encoder.pre_encode.conv.{0,2,...}.{weight,bias})
  ChannelLayerNorm:  the convolution module's norm as LayerNorm over channels, kept under the
                     BatchNorm's attribute name (encoder.layers.i.conv.batch_norm.{weight,bias})
Everything else -- attention, rotary positions, feed-forward, the conv module around the norm,
CTCHead, RNNTHead and both greedy decoders -- is gigaam 0.1.0's own code. The frontend reference
is torchaudio's MelSpectrogram with v3's settings plus gigaam's log clamp.

Writes tests/fixtures/conformer/gigaam_v3/:
  v3_ctc.ckpt                 character CTC model, as gigaam's .ckpt files are
                              ({"cfg": OmegaConf, "state_dict": ...} through torch.save), with the
                              preprocessor buffers in bfloat16 as the published v3 checkpoints hold them
  v3_e2e_rnnt.ckpt            RNN-T model with a SentencePiece tokenizer beside it (punctuation and
  v3_e2e_rnnt_tokenizer.model   capitals, as the e2e models' tokenizers carry)
  reference.safetensors       features, encoder outputs and CTC log-probs (float64 runs of f32 weights),
                              audio samples and their log-mel (f32 and bf16 window/filterbank)
  reference.json              greedy CTC and RNN-T tokens, frames and texts from gigaam's decoders

Usage: /work/gigaamvenv/bin/python scripts/make_gigaam_v3_fixtures.py
"""
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_conformer_fixtures import features, randomize, write_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "conformer", "gigaam_v3")

D_MODEL, N_HEADS, N_LAYERS, N_MELS, KERNEL, SUBS_KERNEL = 16, 2, 2, 64, 5, 5
LABELS = [" ", "а", "б", "в", "г", "д", "е", "ж", "з", "и", "й", "к", "л", "м", "н", "о", "п", "р", "с",
          "т", "у", "ф", "х", "ц", "ч", "ш", "щ", "ъ", "ы", "ь", "э", "ю", "я"]


class Conv1dSubsampling(nn.Module):
    def __init__(self, feat_in, d_model, factor, kernel):
        super().__init__()
        self.kernel, self.steps = kernel, int(math.log2(factor))
        layers, cin = [], feat_in
        for _ in range(self.steps):
            layers += [nn.Conv1d(cin, d_model, kernel, stride=2, padding=(kernel - 1) // 2), nn.ReLU()]
            cin = d_model
        self.conv = nn.Sequential(*layers)

    def forward(self, x, lengths):  # x [B, T, feat_in] as gigaam's encoder passes it
        pad = (self.kernel - 1) // 2
        for _ in range(self.steps):
            lengths = torch.div(lengths + 2 * pad - self.kernel, 2, rounding_mode="floor") + 1
        return self.conv(x.transpose(1, 2)).transpose(1, 2), lengths


class ChannelLayerNorm(nn.LayerNorm):
    def forward(self, x):  # [B, C, T]: normalise over channels
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


def v3_encoder():
    from gigaam.encoder import ConformerEncoder

    enc = ConformerEncoder(feat_in=N_MELS, n_layers=N_LAYERS, d_model=D_MODEL, subsampling_factor=4,
                           ff_expansion_factor=4, self_attention_model="rotary", n_heads=N_HEADS,
                           pos_emb_max_len=5000, conv_kernel_size=KERNEL)
    enc.pre_encode = Conv1dSubsampling(N_MELS, D_MODEL, 4, SUBS_KERNEL)
    for layer in enc.layers:
        layer.conv.batch_norm = ChannelLayerNorm(D_MODEL)
    return enc.eval()


def v3_cfg(model_name, head, decoding):
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "model_class": "rnnt" if "rnnt" in model_name else "ctc", "sample_rate": 16000,
        "preprocessor": {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": 16000, "features": N_MELS,
                         "win_length": 320, "hop_length": 160, "mel_scale": "htk", "n_fft": 320, "mel_norm": None,
                         "center": False},
        "encoder": {"_target_": "gigaam.encoder.ConformerEncoder", "feat_in": N_MELS, "n_layers": N_LAYERS,
                    "d_model": D_MODEL, "subsampling_factor": 4, "ff_expansion_factor": 4,
                    "self_attention_model": "rotary", "pos_emb_max_len": 5000, "n_heads": N_HEADS,
                    "conv_kernel_size": KERNEL, "flash_attn": False, "subs_kernel_size": SUBS_KERNEL,
                    "subsampling": "conv1d", "conv_norm_type": "layer_norm"},
        "head": head, "decoding": decoding, "model_name": model_name,
    })


def mel_module():
    import torchaudio

    return torchaudio.transforms.MelSpectrogram(sample_rate=16000, n_mels=N_MELS, win_length=320, hop_length=160,
                                                n_fft=320, center=False)


def log_mel(mel, samples):
    with torch.no_grad():
        return torch.log(mel(samples).clamp(1e-9, 1e9))


def preprocessor_state():
    """The published v3 checkpoints carry the window and mel filterbank in bfloat16 (onnx-asr 0.12.0's
    gigaam_v3 frontend data are exactly torch's values rounded to bfloat16)."""
    return {"preprocessor.featurizer.0." + k: v.bfloat16() for k, v in mel_module().state_dict().items()}


def save_ckpt(path, cfg, encoder, head):
    state = preprocessor_state()
    state.update({"encoder." + k: v.float() for k, v in encoder.state_dict().items()})
    state.update({"head." + k: v.float() for k, v in head.state_dict().items()})
    torch.save({"cfg": cfg, "state_dict": state}, path)
    print("wrote", path, os.path.getsize(path), "bytes")


def make_tokenizer(path):
    import sentencepiece as spm

    text = ["Привет, как дела у тебя сегодня?", "Модель распознавания речи: пунктуация и Заглавные буквы.",
            "Ничьих не требуя похвал, счастлив уж я надеждой сладкой!"] * 30
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "text.txt"), "w") as f:
            f.write("\n".join(text))
        spm.SentencePieceTrainer.train(input=os.path.join(tmp, "text.txt"), model_prefix=os.path.join(tmp, "t"),
                                       vocab_size=60, model_type="bpe", character_coverage=1.0,
                                       normalization_rule_name="identity", minloglevel=2)
        with open(os.path.join(tmp, "t.model"), "rb") as src, open(path, "wb") as dst:
            dst.write(src.read())
    return spm.SentencePieceProcessor(model_file=path)


def ctc_tokens(log_probs, blank):
    ids = log_probs.argmax(-1).tolist()
    out, prev = [], None
    for t, k in enumerate(ids):
        if k != blank and k != prev:
            out.append({"id": k, "frame": t, "duration": 0})
        prev = k
    return out


def rnnt_tokens(head, encoded, blank, max_symbols):
    """gigaam's greedy loop replayed step by step, to record frames (its decode returns text only)."""
    tokens, state, last = [], None, None
    with torch.no_grad():
        for t in range(encoded.shape[0]):
            f = encoded[t][None, None]
            emitted = 0
            while emitted < max_symbols:
                g, hidden = head.decoder.predict(last, state)
                k = int(head.joint.joint(f, g)[0, 0, 0].argmax())
                if k == blank:
                    break
                tokens.append({"id": k, "frame": t, "duration": 0})
                state, last = hidden, torch.tensor([[k]])
                emitted += 1
    return tokens


def main():
    from gigaam.decoder import CTCHead, RNNTHead
    from gigaam.decoding import CTCGreedyDecoding, RNNTGreedyDecoding

    os.makedirs(OUT, exist_ok=True)
    ref, js = {}, {}
    frame_counts = [45, 9]
    feats = [features(N_MELS, n, 40 + i) for i, n in enumerate(frame_counts)]
    for i, x in enumerate(feats):
        ref[f"features_{i}"] = x.numpy()

    # CTC, characters.
    torch.manual_seed(3)
    enc, head = v3_encoder(), CTCHead(feat_in=D_MODEL, num_classes=len(LABELS) + 1).eval()
    randomize(enc, 11)
    randomize(head, 12)
    cfg = v3_cfg("v3_ctc", {"_target_": "gigaam.decoder.CTCHead", "feat_in": D_MODEL, "num_classes": len(LABELS) + 1},
                 {"_target_": "gigaam.decoding.CTCGreedyDecoding", "vocabulary": LABELS})
    save_ckpt(os.path.join(OUT, "v3_ctc.ckpt"), cfg, enc, head)
    decoding = CTCGreedyDecoding(LABELS)
    js["ctc"] = []
    enc64, head64 = enc.double(), head.double()
    for i, x in enumerate(feats):
        with torch.no_grad():
            out, out_len = enc64(x.double()[None], torch.tensor([x.shape[1]]))
            lp = head64(out)
            text = decoding.decode(head64, out, out_len)[0]
        ref[f"ctc_encoded_{i}"] = out[0].T.numpy()
        ref[f"ctc_log_probs_{i}"] = lp[0].numpy()
        toks = ctc_tokens(lp[0], len(LABELS))
        assert "".join(LABELS[t["id"]] for t in toks).strip() == text.strip(), (toks, text)
        js["ctc"].append({"tokens": toks, "text": text})
        print(f"ctc {i}: {out.shape[2]} frames, {len(toks)} tokens, {text!r}")

    # RNN-T with a SentencePiece tokenizer (the e2e models).
    sp = make_tokenizer(os.path.join(OUT, "v3_e2e_rnnt_tokenizer.model"))
    n = len(sp)
    pred_hidden, joint_hidden, max_symbols = 24, 20, 3
    torch.manual_seed(4)
    enc = v3_encoder()
    head = RNNTHead(decoder={"pred_hidden": pred_hidden, "pred_rnn_layers": 1, "num_classes": n + 1},
                    joint={"enc_hidden": D_MODEL, "pred_hidden": pred_hidden, "joint_hidden": joint_hidden,
                           "num_classes": n + 1}).eval()
    randomize(enc, 21)
    randomize(head, 22)
    cfg = v3_cfg("v3_e2e_rnnt",
                 {"_target_": "gigaam.decoder.RNNTHead",
                  "decoder": {"pred_hidden": pred_hidden, "pred_rnn_layers": 1, "num_classes": n + 1},
                  "joint": {"enc_hidden": D_MODEL, "pred_hidden": pred_hidden, "joint_hidden": joint_hidden,
                            "num_classes": n + 1}},
                 {"_target_": "gigaam.decoding.RNNTGreedyDecoding", "vocabulary": None,
                  "model_path": "/root/.cache/gigaam/v3_e2e_rnnt_tokenizer.model",
                  "max_symbols_per_step": max_symbols})
    decoding = RNNTGreedyDecoding([], model_path=os.path.join(OUT, "v3_e2e_rnnt_tokenizer.model"),
                                  max_symbols_per_step=max_symbols)
    enc64 = enc.double()
    with torch.no_grad():  # a blank bias giving both silent frames and frames at max_symbols
        encoded = enc64(feats[0].double()[None], torch.tensor([feats[0].shape[1]]))[0][0].T.float()
        base = head.joint.joint_net[1].bias[n].item()
        for shift in np.arange(-2.0, 3.0, 0.05):
            head.joint.joint_net[1].bias[n] = base + shift
            counts = np.bincount([t["frame"] for t in rnnt_tokens(head, encoded, n, max_symbols)],
                                 minlength=encoded.shape[0])
            if (counts == 0).sum() >= 1 and (counts == max_symbols).sum() >= 1 and counts.sum() >= 5:
                break
        else:
            raise SystemExit("no blank bias gave a useful RNN-T fixture")
    save_ckpt(os.path.join(OUT, "v3_e2e_rnnt.ckpt"), cfg, enc, head)
    js["rnnt"] = []
    for i, x in enumerate(feats):
        with torch.no_grad():
            out, out_len = enc64(x.double()[None], torch.tensor([x.shape[1]]))
        ref[f"rnnt_encoded_{i}"] = out[0].T.numpy()
        # The head runs in f32 on the encoder output rounded to f32, as the engine's does.
        encoded = out[0].T.float()
        text = decoding.decode(head, encoded.T[None], torch.tensor([encoded.shape[0]]))[0]
        toks = rnnt_tokens(head, encoded, n, max_symbols)
        assert sp.decode([t["id"] for t in toks]) == text, (toks, text)
        js["rnnt"].append({"tokens": toks, "text": text})
        print(f"rnnt {i}: {encoded.shape[0]} frames, {len(toks)} tokens, {text!r}")
    js["rnnt_vocabulary"] = [sp.id_to_piece(i) for i in range(n)]

    # Frontend: 0.3 s of a chirp plus noise; log-mel with f32 and with bf16 window / filterbank.
    g = torch.Generator().manual_seed(7)
    t = torch.arange(4800, dtype=torch.float64) / 16000
    samples = (0.3 * torch.sin(2 * math.pi * (200 + 1500 * t) * t) + 0.02 * torch.randn(4800, generator=g,
                                                                                          dtype=torch.float64))
    samples = samples.float()
    mel = mel_module()
    ref["audio_samples"] = samples.numpy()
    ref["audio_log_mel_f32"] = log_mel(mel, samples).numpy()
    # gigaam's FeatureExtractor loading the checkpoint: its f32 buffers take the stored bf16 values.
    saved = torch.load(os.path.join(OUT, "v3_ctc.ckpt"), map_location="cpu", weights_only=False)["state_dict"]
    prefix = "preprocessor.featurizer.0."
    buffers = {k[len(prefix):]: v for k, v in saved.items() if k.startswith(prefix)}
    assert all(v.dtype == torch.bfloat16 for v in buffers.values()), {k: v.dtype for k, v in buffers.items()}
    mel.load_state_dict(buffers)
    ref["audio_log_mel_bf16"] = log_mel(mel, samples).numpy()
    diff = np.abs(ref["audio_log_mel_bf16"] - ref["audio_log_mel_f32"])
    print("log-mel", diff.shape, "bf16 vs f32 buffers: max", float(diff.max()), "mean", float(diff.mean()))

    write_safetensors(os.path.join(OUT, "reference.safetensors"), ref)
    js["reference"] = ("gigaam 0.1.0 ConformerEncoder with v3's conv1d subsampling and layer-norm conv module "
                       "(scripts/make_gigaam_v3_fixtures.py), CTCGreedyDecoding, RNNTGreedyDecoding")
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(js, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
