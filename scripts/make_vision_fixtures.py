#!/usr/bin/env python3
"""Writes tests/fixtures/vision/: tiny random-init ViT / DINOv2 models and transformers' outputs.

  tiny-vit-cls/        ViTForImageClassification (5 labels, no pooler)
  tiny-vit-pooler/     ViTModel with its pooler (dense + tanh on the CLS token), 1 layer
  tiny-dinov2/         Dinov2ForImageClassification (LayerScale, classifier on [CLS, mean patches])
  tiny-dinov2-reg/     Dinov2WithRegistersForImageClassification (4 register tokens)
  <tiny>/reference.json  per input: its shape [N, 3, H, W], last_hidden_state [N, T, D], pooled
                       output (pooler models) and logits (classifiers)

All models: hidden 32, 2 layers, 4 heads, MLP 64, image 32, patch 8 (16 patches). Inputs are not
stored: pixel [n, c, y, x] = sin(0.37 x + 0.91 y + 1.3 c + 2.1 n) * 1.7 + 0.05 * (x - y),
computed in double and rounded to f32 (the test computes the same). Inputs at 32x32 (the model's
size) and at other sizes: 48x40 (upsampled position embeddings) and 16x24 (downsampled; DINOv2
with registers interpolates with antialias=True, which differs from plain bicubic there).
ViT interpolates only when asked (interpolate_pos_encoding=True); DINOv2 always does.

Every model is re-randomised with large weights (as scripts/make_encoder_fixtures.py does) so that
attention is far from uniform, and LayerScale / biases are random rather than their init constants.

Needs torch, transformers, numpy (scripts/requirements.txt).
Usage: python scripts/make_vision_fixtures.py
"""
import json
import os
import shutil

import numpy as np
import torch
import transformers
from transformers import (Dinov2Config, Dinov2ForImageClassification, Dinov2WithRegistersConfig,
                          Dinov2WithRegistersForImageClassification, ViTConfig,
                          ViTForImageClassification, ViTModel)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "vision")

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=32,
            patch_size=8, num_channels=3)
SIZES = [(2, 32, 32), (1, 48, 40), (1, 16, 24)]  # (batch, height, width)


def pixels(n, h, w):
    x = np.arange(w, dtype=np.float64)[None, None, None, :]
    y = np.arange(h, dtype=np.float64)[None, None, :, None]
    c = np.arange(3, dtype=np.float64)[None, :, None, None]
    b = np.arange(n, dtype=np.float64)[:, None, None, None]
    v = np.sin(0.37 * x + 0.91 * y + 1.3 * c + 2.1 * b) * 1.7 + 0.05 * (x - y)
    return torch.from_numpy(v.astype(np.float32))


def rerandomise(model, seed):
    """Large random weights: norms and LayerScale around 1, matrices with unit-variance outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and (name.endswith("weight") or name.endswith("lambda1")):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "token" in name or "position_embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(1.5 * torch.randn(p.shape, generator=g) / fan_in ** 0.5)


def rounded(t):
    return np.round(t.detach().numpy().astype(np.float64), 6).tolist()


def save(name, model, forward):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    entries = []
    for n, h, w in SIZES:
        with torch.no_grad():
            out = forward(pixels(n, h, w))
        e = {"shape": [n, 3, h, w]}
        if out is None:
            e["error"] = True
        else:
            hidden, pooled, logits = out
            e["last_hidden_state"] = rounded(hidden)
            if pooled is not None:
                e["pooled"] = rounded(pooled)
            if logits is not None:
                e["logits"] = rounded(logits)
        entries.append(e)
    doc = {"made_by": "scripts/make_vision_fixtures.py", "torch": torch.__version__,
           "transformers": transformers.__version__, "inputs": entries}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))


def main():
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)

    cfg = ViTConfig(**TINY, intermediate_size=64, num_labels=5, attn_implementation="eager")
    vit = ViTForImageClassification(cfg).eval()
    rerandomise(vit, 1)

    def vit_cls(px):
        o = vit(px, interpolate_pos_encoding=px.shape[-2:] != (32, 32), output_hidden_states=True)
        return vit.vit.layernorm(o.hidden_states[-1]), None, o.logits
    save("tiny-vit-cls", vit, vit_cls)

    vitm = ViTModel(ViTConfig(**{**TINY, "num_hidden_layers": 1}, intermediate_size=64,
                              attn_implementation="eager")).eval()
    rerandomise(vitm, 2)

    def vit_pool(px):
        o = vitm(px, interpolate_pos_encoding=px.shape[-2:] != (32, 32))
        return o.last_hidden_state, o.pooler_output, None
    save("tiny-vit-pooler", vitm, vit_pool)

    dcfg = Dinov2Config(**TINY, mlp_ratio=2, num_labels=5, attn_implementation="eager")
    dino = Dinov2ForImageClassification(dcfg).eval()
    rerandomise(dino, 3)

    def dino_fwd(px):
        o = dino(px, output_hidden_states=True)
        return dino.dinov2.layernorm(o.hidden_states[-1]), None, o.logits
    save("tiny-dinov2", dino, dino_fwd)

    rcfg = Dinov2WithRegistersConfig(**TINY, mlp_ratio=2, num_register_tokens=4, num_labels=5,
                                     attn_implementation="eager")
    reg = Dinov2WithRegistersForImageClassification(rcfg).eval()
    rerandomise(reg, 4)

    def reg_fwd(px):
        o = reg(px, output_hidden_states=True)
        return reg.dinov2_with_registers.layernorm(o.hidden_states[-1]), None, o.logits
    save("tiny-dinov2-reg", reg, reg_fwd)


if __name__ == "__main__":
    main()
