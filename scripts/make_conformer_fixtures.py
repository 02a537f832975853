#!/usr/bin/env python3
"""Reference outputs for the conformer encoder (tests/models/test_conformer_encoder.cpp).

Tiny randomly initialised models of the real architectures, run by their upstream code:
  parakeet: transformers' ParakeetForCTC (FastConformer: dw_striding subsampling, rel_pos
            attention, xscaling, batch norm) -- run with the /work/venv interpreter
            (torch 2.15.0, transformers 5.24.0).
  gigaam:   the gigaam 0.1.0 package's ConformerEncoder (striding subsampling, rotary and rel_pos
            attention, no xscaling) + CTCHead -- run with a venv holding gigaam==0.1.0 (it pulls
            torch 2.5.1).

Weights are written under NeMo's checkpoint names (what ConformerModel reads) as f32
safetensors; the untouched transformers checkpoint (save_pretrained) is kept too, for the
HF -> NeMo renaming loader's tests. References are computed in float64 from those f32 weights.

Usage:  /work/venv/bin/python scripts/make_conformer_fixtures.py parakeet
        /work/gigaamvenv/bin/python scripts/make_conformer_fixtures.py gigaam
"""
import json
import os
import re
import struct
import sys

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "conformer", "encoder")


def write_safetensors(path, tensors):
    """Plain f32 safetensors writer (the gigaam venv has no safetensors package)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def randomize(model, seed):
    """Every parameter and batch-norm statistic random, so that no term is trivially zero or one."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if not p.is_floating_point():
                continue
            r = torch.randn(p.shape, generator=g)
            if name.endswith("running_var"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif p.dim() >= 2:
                p.copy_(r / np.sqrt(p[0].numel()))
            elif re.search(r"norm[^.]*\.weight$", name):
                p.copy_(1.0 + 0.1 * r)
            else:
                p.copy_(0.1 * r)


def features(n_mels, frames, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_mels, frames, generator=g)


def nemo_state_dict(state):
    return {k: v.float().numpy() for k, v in state.items() if v.is_floating_point()}


# transformers Parakeet names -> NeMo names (the inverse of its converter's renames).
HF_TO_NEMO = [
    (r"^encoder\.subsampling\.layers\.", "encoder.pre_encode.conv."),
    (r"^encoder\.subsampling\.linear\.", "encoder.pre_encode.out."),
    (r"\.conv\.norm\.", ".conv.batch_norm."),
    (r"^ctc_head\.", "decoder.decoder_layers.0."),
    (r"\.self_attn\.q_proj\.", ".self_attn.linear_q."),
    (r"\.self_attn\.k_proj\.", ".self_attn.linear_k."),
    (r"\.self_attn\.v_proj\.", ".self_attn.linear_v."),
    (r"\.self_attn\.o_proj\.", ".self_attn.linear_out."),
    (r"\.self_attn\.relative_k_proj\.", ".self_attn.linear_pos."),
    (r"\.self_attn\.bias_([uv])$", r".self_attn.pos_bias_\1"),
]


def hf_to_nemo(name):
    for pattern, repl in HF_TO_NEMO:
        name = re.sub(pattern, repl, name)
    return name


def make_parakeet():
    from transformers import ParakeetCTCConfig, ParakeetEncoderConfig, ParakeetForCTC

    enc = ParakeetEncoderConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        conv_kernel_size=9, subsampling_factor=8, subsampling_conv_channels=16, num_mel_bins=32,
        dropout=0.0, dropout_positions=0.0, layerdrop=0.0, activation_dropout=0.0,
        attention_dropout=0.0, scale_input=True, attention_bias=True, convolution_bias=True)
    cfg = ParakeetCTCConfig(encoder_config=enc.to_dict(), vocab_size=17, pad_token_id=16)
    torch.manual_seed(0)
    model = ParakeetForCTC(cfg).eval()
    randomize(model, 1)

    hf_dir = os.path.join(OUT, "parakeet_ctc_tiny_hf")
    model.save_pretrained(hf_dir)
    state = {hf_to_nemo(k): v for k, v in model.state_dict().items()}
    nemo_dir = os.path.join(OUT, "parakeet_ctc_tiny")
    os.makedirs(nemo_dir, exist_ok=True)
    write_safetensors(os.path.join(nemo_dir, "model.safetensors"), nemo_state_dict(state))

    ref = {}
    m64 = model.double()
    for i, frames in enumerate([67, 5]):
        x = features(32, frames, 10 + i)
        with torch.no_grad():
            out = m64.encoder(input_features=x.double().T[None])
            h = out.last_hidden_state[0]
            logits = m64.ctc_head(h[None])[0]
        ref[f"features_{i}"] = x.numpy()
        ref[f"encoded_{i}"] = h.numpy()
        ref[f"log_probs_{i}"] = torch.log_softmax(logits, dim=-1).numpy()
    write_safetensors(os.path.join(nemo_dir, "reference.safetensors"), ref)
    print("parakeet:", {k: v.shape for k, v in ref.items()})


def make_gigaam():
    from gigaam.decoder import CTCHead
    from gigaam.encoder import ConformerEncoder

    for attention, layers, seed in [("rotary", 2, 2), ("rel_pos", 1, 3)]:
        torch.manual_seed(0)
        enc = ConformerEncoder(feat_in=32, n_layers=layers, d_model=32, subsampling_factor=4,
                               ff_expansion_factor=4, self_attention_model=attention, n_heads=4,
                               pos_emb_max_len=5000, conv_kernel_size=5).eval()
        head = CTCHead(feat_in=32, num_classes=17).eval()
        randomize(enc, seed)
        randomize(head, seed + 100)
        state = {"encoder." + k: v for k, v in enc.state_dict().items()}
        state.update({"decoder." + k: v for k, v in head.state_dict().items()})
        d = os.path.join(OUT, f"gigaam_{attention}_tiny")
        os.makedirs(d, exist_ok=True)
        write_safetensors(os.path.join(d, "model.safetensors"), nemo_state_dict(state))

        enc64, head64 = enc.double(), head.double()
        ref = {}
        for i, frames in enumerate([37, 3]):
            x = features(32, frames, 20 + i)
            with torch.no_grad():
                out, _ = enc64(x.double()[None], torch.tensor([frames]))
                lp = head64(out)[0]
            ref[f"features_{i}"] = x.numpy()
            ref[f"encoded_{i}"] = out[0].T.numpy()
            ref[f"log_probs_{i}"] = lp.numpy()
        write_safetensors(os.path.join(d, "reference.safetensors"), ref)
        print(f"gigaam {attention}:", {k: v.shape for k, v in ref.items()})


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which == "parakeet":
        make_parakeet()
    elif which == "gigaam":
        make_gigaam()
    else:
        sys.exit("usage: make_conformer_fixtures.py parakeet|gigaam")
