#!/usr/bin/env python3
"""Writes the weight-format interop fixtures in tests/fixtures/weights/ with the upstream
`safetensors` and `gguf` packages (pinned in scripts/requirements.txt). The C++ tests read them
and compare names, shapes, metadata and values. Deterministic; all files together stay small.

    /work/venv/bin/python scripts/make_weight_fixtures.py
"""
import json
import os

import numpy as np
import torch
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import save_file as save_torch
import gguf
from gguf.quants import dequantize, quantize

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "weights")
rng = np.random.default_rng(1234)


def values(*shape):
    # Exactly representable in bf16 for the bf16 tensor, small integers/8 for the others.
    return (rng.integers(-64, 64, size=shape) / 8.0).astype(np.float32)


def write_safetensors():
    tensors = {
        "linear.weight": torch.from_numpy(values(3, 4)),
        "linear.bias": torch.from_numpy(values(3)),
        "half": torch.from_numpy(values(2, 8)).to(torch.float16),
        "brain": torch.from_numpy(values(4, 2)).to(torch.bfloat16),
        "ids": torch.arange(5, dtype=torch.int32),
        "codes": torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8),
        "steps": torch.tensor([7], dtype=torch.int64),  # a dtype the engine does not have
        "scalar": torch.tensor(2.5, dtype=torch.float32),
    }
    save_torch(tensors, os.path.join(OUT, "tiny.safetensors"),
               metadata={"format": "pt", "note": "xdna fixture"})

    # A sharded checkpoint directory the way Hugging Face lays one out.
    d = os.path.join(OUT, "sharded")
    os.makedirs(d, exist_ok=True)
    shard1 = {"model.embed_tokens.weight": values(8, 16), "model.norm.weight": values(16)}
    shard2 = {"model.layers.0.mlp.up_proj.weight": values(32, 16),
              "lm_head.weight": values(8, 16)}
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    save_numpy(shard1, os.path.join(d, names[0]), metadata={"format": "pt"})
    save_numpy(shard2, os.path.join(d, names[1]), metadata={"format": "pt"})
    weight_map = {k: names[0] for k in shard1} | {k: names[1] for k in shard2}
    total = sum(v.nbytes for v in (shard1 | shard2).values())
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": 16, "vocab_size": 8}, f)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}, f)


def kquant_blocks(qtype, rows, cols):
    """Random K-quant bytes with sane f16 super-block scales (gguf-py cannot encode K-quants)."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // block_elems, block_bytes), dtype=np.uint8)
    d = np.array([0.01], dtype=np.float16).view(np.uint8)
    dmin = np.array([0.002], dtype=np.float16).view(np.uint8)
    if qtype in (gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q5_K):
        blocks[:, 0:2] = d   # d, then dmin, lead the block
        blocks[:, 2:4] = dmin
    else:  # Q6_K: d is the last two bytes
        blocks[:, -2:] = d
    return blocks.reshape(rows, -1)


def write_gguf():
    path = os.path.join(OUT, "tiny.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.5)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**40))
    w.add_float64("test.f64", 3.25)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo")
    w.add_array("test.ints", [1, 2, 3])
    w.add_array("test.strings", ["a", "bc", ""])
    w.add_array("test.nested", [[1, 2], [3]])
    w.add_uint32("llama.context_length", 128)

    f32 = values(2, 32)
    w.add_tensor("f32", f32)
    w.add_tensor("f16", values(2, 32).astype(np.float16))
    bf = values(2, 32)
    w.add_tensor("bf16", quantize(bf, gguf.GGMLQuantizationType.BF16),
                 raw_dtype=gguf.GGMLQuantizationType.BF16)
    T = gguf.GGMLQuantizationType
    raw = {
        "q8_0": quantize(values(3, 64), T.Q8_0),
        "q4_0": quantize(values(2, 64), T.Q4_0),
        "q4_1": quantize(values(1, 32), T.Q4_1),  # a type the engine does not support
        "q4_k": kquant_blocks(T.Q4_K, 2, 256),
        "q5_k": kquant_blocks(T.Q5_K, 1, 256),
        "q6_k": kquant_blocks(T.Q6_K, 2, 256),
    }
    types = {"q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1, "q4_k": T.Q4_K, "q5_k": T.Q5_K,
             "q6_k": T.Q6_K}
    for name, data in raw.items():
        w.add_tensor(name, data, raw_dtype=types[name])
    w.add_tensor("vec", values(4))  # 1-D
    w.add_tensor("cube", values(2, 3, 4))  # 3-D: GGUF stores dims as [4, 3, 2]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # Expected f32 values, dequantized by gguf-py, for the engine's decoders to match.
    r = gguf.GGUFReader(path)
    expected = {}
    for t in r.tensors:
        if t.tensor_type == T.Q4_1:
            continue
        expected[t.name] = np.ascontiguousarray(
            dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
                [int(x) for x in reversed(t.shape)]))
    save_numpy(expected, os.path.join(OUT, "tiny_gguf_expected.safetensors"))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    write_safetensors()
    write_gguf()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote fixtures in {os.path.normpath(OUT)}: {total} bytes")
