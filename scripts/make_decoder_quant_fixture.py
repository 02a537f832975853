#!/usr/bin/env python3
"""The tiny gemma3 decoder fixture as llama.cpp's Q4_K_M files store Gemma 3: q, k, gate and up in
q5_0, v in q8_0 (the decoder fuses q|k|v and gate|up of such files into one matrix each), plus
the same dequantized values in f32, so a test can check that both files give the same logits.

Writes tests/fixtures/decoders/gemma3/model-q5q8.gguf and model-q5q8-f32.gguf from that
directory's model.safetensors (run make_decoder_fixtures.py first). From the repo root:
  /work/venv/bin/python scripts/make_decoder_quant_fixture.py
"""
import os
import sys

import gguf
import numpy as np
from safetensors.torch import load_file
from transformers import Gemma3TextConfig

sys.path.insert(0, os.path.dirname(__file__))
import make_decoder_fixtures as fixtures  # noqa: E402

DIR = os.path.join(fixtures.OUT, "gemma3")
QUANT = {"attn_q": gguf.GGMLQuantizationType.Q5_0, "attn_k": gguf.GGMLQuantizationType.Q5_0,
         "ffn_gate": gguf.GGMLQuantizationType.Q5_0, "ffn_up": gguf.GGMLQuantizationType.Q5_0,
         "attn_v": gguf.GGMLQuantizationType.Q8_0}


def write(path, dequantized):
    add_tensor = gguf.GGUFWriter.add_tensor

    def patched(self, name, tensor, *args, **kwargs):
        qtype = next((q for key, q in QUANT.items() if f".{key}." in name), None)
        if qtype is None:
            return add_tensor(self, name, tensor, *args, **kwargs)
        packed = gguf.quants.quantize(tensor.astype(np.float32), qtype)
        if dequantized:
            return add_tensor(self, name, gguf.quants.dequantize(packed, qtype).astype(np.float32))
        return add_tensor(self, name, packed, raw_dtype=qtype)

    gguf.GGUFWriter.add_tensor = patched
    try:
        cfg = Gemma3TextConfig.from_pretrained(DIR)
        fixtures.write_gguf(path, "gemma3", cfg, load_file(os.path.join(DIR, "model.safetensors")))
    finally:
        gguf.GGUFWriter.add_tensor = add_tensor


if __name__ == "__main__":
    write(os.path.join(DIR, "model-q5q8.gguf"), False)
    write(os.path.join(DIR, "model-q5q8-f32.gguf"), True)
