#!/usr/bin/env python3
"""Writes tests/fixtures/formats/: reference data for the number formats (src/core/numeric.h).

GGML blocks: for each of Q8_0, Q4_0, Q4_K, Q5_K, Q6_K (and Q5_0, written last), `<type>.bin` holds random but valid raw
blocks (random quant bytes and packed scales; the f16 scale fields set to chosen finite values,
f16 subnormals and zero included) and `<type>.f32` the values the `gguf` package's dequantizer
(gguf-py, gguf/quants.py) gives for them, as little-endian f32. gguf 0.10.0 implements all six
dequantizers, so no reference code of our own is involved.

Half floats: `halves.bin` holds records of (u32 f32 bits, u16 f16 bits, u16 bf16 bits): f32
inputs (edge cases, round-to-nearest-even ties, random bit patterns) with numpy's f32 -> f16 and
torch's f32 -> bf16 conversions (both round to nearest, ties to even).

Deterministic (fixed seed): rerunning rewrites identical files.
Run: /path/to/venv/bin/python scripts/make_format_fixtures.py   (venv: scripts/setup-venv.sh)
"""
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "formats"
rng = np.random.default_rng(20240601)

# (type, blocks, byte offsets of the f16 scale fields in a block)
GGML_TYPES = [
    (QT.Q8_0, 16, [0]),
    (QT.Q4_0, 16, [0]),
    (QT.Q4_K, 6, [0, 2]),    # d, dmin
    (QT.Q5_K, 6, [0, 2]),    # d, dmin
    (QT.Q6_K, 6, [208]),     # d at the end
]
# Types added later: written after halves.bin, so the files above keep their bytes.
LATER_GGML_TYPES = [
    (QT.Q5_0, 16, [0]),
]

# Scale fields cycle through these: typical magnitudes of both signs, plus zero, the smallest and
# largest f16 subnormals, and a large normal (so f16 decoding is exercised through every path).
SPECIAL_F16 = np.array([0.0, -0.0, 2.0**-24, 1023 * 2.0**-24, 2.0**-14, 1000.0], np.float16)


def f16_fields(count):
    typical = (rng.uniform(2.0**-10, 2.0**-3, count) * rng.choice([-1, 1], count)).astype(np.float16)
    special = SPECIAL_F16[rng.integers(0, len(SPECIAL_F16), count)]
    return np.where(rng.random(count) < 0.25, special, typical).astype(np.float16)


def write_ggml(qtype, nblocks, f16_offsets):
    block_values, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (nblocks, block_bytes), dtype=np.uint8)
    for off in f16_offsets:
        raw[:, off:off + 2] = f16_fields(nblocks).view(np.uint8).reshape(nblocks, 2)
    ref = dequantize(raw, qtype).astype("<f4")
    assert ref.shape == (nblocks, block_values) and np.isfinite(ref).all()
    name = qtype.name.lower()
    (OUT / f"{name}.bin").write_bytes(raw.tobytes())
    (OUT / f"{name}.f32").write_bytes(ref.tobytes())
    print(f"{name}: {nblocks} blocks, {raw.nbytes} + {ref.nbytes} bytes")


def half_inputs():
    f = np.float32
    edge = [
        0.0, -0.0, 1.0, -1.0, 3.0, np.inf, -np.inf, np.nan, -np.nan,
        65504.0, 65519.0, 65519.996, 65520.0, 65536.0, 1e10, -1e10,
        np.finfo(f).max, -np.finfo(f).max, np.finfo(f).tiny, 1e-45, -1e-45,
        2.0**-14, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0000001, 3 * 2.0**-26, 2.0**-26,
        1023 * 2.0**-24, 1023.5 * 2.0**-24, 1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11),
        1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 3 * 2.0**-8), 1 + 2.0**-8 + 2.0**-20,
    ]
    values = np.array(edge, np.float32)
    bits = [values.view(np.uint32)]
    bits.append(rng.integers(0, 2**32, 600, dtype=np.uint64).astype(np.uint32))  # anything
    span = rng.uniform(-30, 17, 300)  # magnitudes over the f16 range, both signs
    bits.append((rng.choice([-1, 1], 300) * 2.0**span).astype(np.float32).view(np.uint32))
    # f16 and bf16 ties: f32 values exactly halfway between neighbours.
    # f16 normal bits h sit at f32 bits (h << 13) + (112 << 23); the tie adds half a step.
    tie16 = ((rng.integers(0x0400, 0x7BFF, 40).astype(np.uint32) << 13) + 0x38000000) | 0x1000
    tie16_sub = ((rng.integers(0, 1024, 20) + 0.5) * 2.0**-24).astype(np.float32).view(np.uint32)
    tie_bf16 = (rng.integers(0x0001, 0x7F7F, 40).astype(np.uint32) << 16) | 0x8000
    sign = rng.integers(0, 2, 100).astype(np.uint32) << 31
    bits.append(np.concatenate([tie16, tie16_sub, tie_bf16]) | sign)
    return np.concatenate(bits).astype(np.uint32)


def write_halves():
    bits = half_inputs()
    x = bits.view(np.float32)
    with np.errstate(over="ignore"):
        f16 = x.astype(np.float16).view(np.uint16)
    bf16 = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    rec = np.zeros(len(bits), dtype=[("f32", "<u4"), ("f16", "<u2"), ("bf16", "<u2")])
    rec["f32"], rec["f16"], rec["bf16"] = bits, f16, bf16
    (OUT / "halves.bin").write_bytes(rec.tobytes())
    print(f"halves: {len(bits)} records, {rec.nbytes} bytes")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for qtype, nblocks, offsets in GGML_TYPES:
        write_ggml(qtype, nblocks, offsets)
    write_halves()
    for qtype, nblocks, offsets in LATER_GGML_TYPES:
        write_ggml(qtype, nblocks, offsets)


if __name__ == "__main__":
    main()
