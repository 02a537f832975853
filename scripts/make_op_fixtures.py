#!/usr/bin/env python3
"""Writes reference input/output tensors for the host op tests (tests/host/test_ops.cpp).

References are PyTorch (torch.nn.functional) and, for rotary embeddings, the Hugging Face
transformers helpers themselves: Llama's apply_rotary_pos_emb (half-split pairs) and GPT-J's
(interleaved pairs). Seeds are fixed, so re-running gives identical files.

File format, one file per case, tests/fixtures/ops/<case>.bin:
  line 1: JSON header {"op": ..., "attrs": {...}, "inputs": [{"name", "dtype", "shape"}...],
          "output": {"dtype", "shape"}}, terminated by "\\n"
  then:   the inputs' data in order, then the output's, packed little-endian f32 / i32.

Usage: /work/venv/bin/python scripts/make_op_fixtures.py [out_dir]
"""
import json
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from transformers.models.gptj import modeling_gptj
from transformers.models.llama import modeling_llama
from transformers.models.llama.configuration_llama import LlamaConfig

OUT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                   pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/ops")


def write_case(name, op, attrs, inputs, output):
    """inputs: list of (name, tensor); tensors are f32 or i32."""
    def meta(t):
        dtype = {torch.float32: "f32", torch.int32: "i32"}[t.dtype]
        return {"dtype": dtype, "shape": list(t.shape)}

    header = {"op": op, "attrs": attrs,
              "inputs": [dict(name=n, **meta(t)) for n, t in inputs],
              "output": meta(output)}
    with open(OUT / f"{name}.bin", "wb") as f:
        f.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        for t in [t for _, t in inputs] + [output]:
            arr = t.detach().contiguous().numpy()
            f.write(arr.astype(arr.dtype.newbyteorder("<")).tobytes())


def randn(*shape, scale=1.0):
    return torch.randn(*shape, dtype=torch.float32) * scale


def elementwise():
    a, b = randn(5, 7), randn(7)
    write_case("add_broadcast", "add", {}, [("a", a), ("b", b)], a + b)
    a, b = randn(3, 4, 6), randn(3, 4, 6)
    write_case("add_same", "add", {}, [("a", a), ("b", b)], a + b)
    a, b = randn(2, 3, 9), randn(3, 9)
    write_case("mul_broadcast", "mul", {}, [("a", a), ("b", b)], a * b)
    x = randn(13)
    write_case("scale", "scale", {"scale": 0.37}, [("x", x)], x * 0.37)
    x = randn(257, scale=3.0)
    write_case("gelu", "gelu", {}, [("x", x)], F.gelu(x))
    write_case("gelu_tanh", "gelu_tanh", {}, [("x", x)], F.gelu(x, approximate="tanh"))
    write_case("silu", "silu", {}, [("x", x)], F.silu(x))
    write_case("relu", "relu", {}, [("x", x)], F.relu(x))


def norms():
    for name, shape, eps, bias, shift in [("layer_norm", (4, 33), 1e-5, True, 0.0),
                                          ("layer_norm_nobias", (3, 64), 1e-6, False, 0.0),
                                          ("layer_norm_offset_mean", (2, 40), 1e-5, True, 100.0)]:
        x, w, b = randn(*shape) + shift, randn(shape[-1]), randn(shape[-1])
        y = F.layer_norm(x, (shape[-1],), w, b if bias else None, eps)
        ins = [("x", x), ("w", w)] + ([("b", b)] if bias else [])
        write_case(name, "layer_norm", {"eps": eps}, ins, y)
    for name, shape, eps, offset in [("rms_norm", (5, 48), 1e-6, 0.0),
                                     ("rms_norm_gemma", (3, 31), 1e-6, 1.0)]:
        x, w = randn(*shape), randn(shape[-1]) * 0.1
        y = F.rms_norm(x, (shape[-1],), w + offset, eps)
        write_case(name, "rms_norm", {"eps": eps, "rms_offset": offset}, [("x", x), ("w", w)], y)


def softmaxes():
    x = randn(6, 37, scale=5.0)
    write_case("softmax", "softmax", {}, [("x", x)], F.softmax(x, dim=-1))
    x = randn(2, 1000, scale=30.0) + 500.0
    write_case("softmax_large", "softmax", {}, [("x", x)], F.softmax(x, dim=-1))
    x = randn(4, 3, 5)
    x[0, 1, 2] = -math.inf
    x[2, 0, :4] = -math.inf
    write_case("softmax_masked", "softmax", {}, [("x", x)], F.softmax(x, dim=-1))


def llama_rope(x, position, theta, rope_dims):
    """x [T, H, D]; rotates the first rope_dims of each head with transformers' Llama code."""
    T, H, D = x.shape
    cfg = LlamaConfig(hidden_size=H * rope_dims, num_attention_heads=H, head_dim=rope_dims,
                      rope_parameters={"rope_type": "default", "rope_theta": theta})
    rot = modeling_llama.LlamaRotaryEmbedding(cfg)
    pos = torch.arange(position, position + T)[None, :]
    cos, sin = rot(x[None], pos)  # [1, T, rope_dims]
    xr, xp = x[None, :, :, :rope_dims], x[None, :, :, rope_dims:]
    yr, _ = modeling_llama.apply_rotary_pos_emb(xr, xr, cos, sin, unsqueeze_dim=2)
    return torch.cat([yr, xp], dim=-1)[0]


def gptj_rope(x, position, rope_dims):
    """x [T, H, D]; GPT-J's interleaved rotary embedding (theta fixed at 10000 there)."""
    T = x.shape[0]
    table = modeling_gptj.create_sinusoidal_positions(position + T, rope_dims)
    sincos = table[torch.arange(position, position + T)][None]  # [1, T, rope_dims]
    sin, cos = torch.split(sincos, rope_dims // 2, dim=-1)
    xr, xp = x[None, :, :, :rope_dims], x[None, :, :, rope_dims:]
    yr = modeling_gptj.apply_rotary_pos_emb(xr, sin, cos)
    return torch.cat([yr, xp], dim=-1)[0]


def ropes():
    cases = [("rope_half", (5, 3, 16), 0, 10000.0, 0),
             ("rope_half_pos", (4, 2, 12), 37, 10000.0, 0),
             ("rope_half_llama3", (3, 2, 64), 4000, 500000.0, 0),
             ("rope_half_partial", (3, 2, 12), 5, 10000.0, 8)]
    for name, shape, pos, theta, rd in cases:
        x = randn(*shape)
        y = llama_rope(x, pos, theta, rd or shape[-1])
        write_case(name, "rope", {"rope_layout": "half_split", "position": pos,
                                  "rope_theta": theta, "rope_dims": rd}, [("x", x)], y)
    for name, shape, pos, rd in [("rope_interleaved", (5, 3, 16), 0, 0),
                                 ("rope_interleaved_pos", (3, 2, 10), 123, 0),
                                 ("rope_interleaved_partial", (2, 2, 12), 9, 4)]:
        x = randn(*shape)
        y = gptj_rope(x, pos, rd or shape[-1])
        write_case(name, "rope", {"rope_layout": "interleaved", "position": pos,
                                  "rope_theta": 10000.0, "rope_dims": rd}, [("x", x)], y)


def attention_ref(q, k, v, causal=False, q_offset=0, window=0, softcap=0.0, scale=None, mask=None):
    """q [T, Hq, D], k/v [S, Hkv, D] -> [T, Hq, Dv] with torch's scaled_dot_product_attention,
    or an explicit torch computation when soft-capping (SDPA has no soft-cap)."""
    T, Hq, D = q.shape
    S, Hkv, _ = k.shape
    pos = torch.arange(T)[:, None] + q_offset
    j = torch.arange(S)[None, :]
    allowed = torch.ones(T, S, dtype=torch.bool)
    if causal:
        allowed &= j <= pos
    if window:
        allowed &= pos - j < window
    bias = torch.zeros(T, S).masked_fill(~allowed, -math.inf)
    if mask is not None:
        bias = bias + mask
    qh, kh, vh = (t.transpose(0, 1)[None] for t in (q, k, v))  # [1, H, L, D]
    if softcap:
        s = (scale or 1 / math.sqrt(D))
        kh, vh = (t.repeat_interleave(Hq // Hkv, dim=1) for t in (kh, vh))
        logits = softcap * torch.tanh(qh @ kh.transpose(-1, -2) * s / softcap) + bias
        out = torch.softmax(logits, dim=-1) @ vh
    else:
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=bias, scale=scale,
                                             enable_gqa=True)
    return out[0].transpose(0, 1).contiguous()


def attentions():
    cases = [  # name, T, S, Hq, Hkv, D, Dv, attrs
        ("attn_full", 5, 5, 4, 4, 16, 16, {}),
        ("attn_causal_gqa", 7, 7, 6, 2, 8, 8, {"causal": True}),
        ("attn_causal_offset_mqa", 3, 10, 4, 1, 16, 16, {"causal": True, "q_offset": 7}),
        ("attn_window", 9, 9, 2, 2, 8, 8, {"causal": True, "window": 4}),
        ("attn_window_offset", 4, 13, 4, 2, 8, 8, {"causal": True, "window": 5, "q_offset": 9}),
        ("attn_softcap", 6, 6, 4, 2, 8, 8, {"causal": True, "softcap": 5.0, "attn_scale": 0.4}),
        ("attn_scale_dv", 4, 6, 2, 1, 8, 12, {"attn_scale": 0.25}),
        ("attn_decode", 1, 12, 8, 2, 32, 32, {"causal": True, "q_offset": 11}),
        # 16 or more query rows take the GEMM path; 70 rows span two 64-row blocks.
        ("attn_prefill_causal", 33, 33, 6, 2, 16, 16, {"causal": True}),
        ("attn_prefill_window_offset", 70, 80, 4, 2, 8, 8,
         {"causal": True, "window": 24, "q_offset": 10}),
        ("attn_prefill_softcap", 20, 24, 2, 1, 16, 12, {"softcap": 8.0}),
    ]
    for name, T, S, Hq, Hkv, D, Dv, attrs in cases:
        q, k, v = randn(T, Hq, D, scale=2.0), randn(S, Hkv, D, scale=2.0), randn(S, Hkv, Dv)
        y = attention_ref(q, k, v, attrs.get("causal", False), attrs.get("q_offset", 0),
                          attrs.get("window", 0), attrs.get("softcap", 0.0), attrs.get("attn_scale"))
        write_case(name, "attention", attrs, [("q", q), ("k", k), ("v", v)], y)
    # Padded batch row: the last 3 keys are padding, hidden by an additive mask.
    T, S = 4, 7
    q, k, v = randn(T, 2, 8), randn(S, 2, 8), randn(S, 2, 8)
    mask = torch.zeros(T, S)
    mask[:, 4:] = -math.inf
    mask[1, 0] = -2.5
    y = attention_ref(q, k, v, mask=mask)
    write_case("attn_mask", "attention", {}, [("q", q), ("k", k), ("v", v), ("mask", mask)], y)
    T, S = 18, 18  # the same through the GEMM path, causal on top
    q, k, v = randn(T, 2, 8), randn(S, 2, 8), randn(S, 2, 8)
    mask = torch.zeros(T, S)
    mask[:, :3] = -math.inf  # left padding
    mask[5] = 1.5
    y = attention_ref(q, k, v, causal=True, mask=mask)
    write_case("attn_prefill_mask", "attention", {"causal": True},
               [("q", q), ("k", k), ("v", v), ("mask", mask)], y)


def convs():
    c1 = [  # name, Cin, L, Cout, K, stride, pad, dil, groups, bias
        ("conv1d", 4, 19, 6, 3, 1, 1, 1, 1, True),
        ("conv1d_strided_dilated_grouped", 4, 23, 6, 3, 2, 2, 2, 2, True),
        ("conv1d_depthwise", 4, 17, 8, 5, 1, 2, 1, 4, False),
    ]
    for name, cin, L, cout, K, s, p, d, g, bias in c1:
        x, w, b = randn(cin, L), randn(cout, cin // g, K), randn(cout)
        y = F.conv1d(x[None], w, b if bias else None, s, p, d, g)[0]
        ins = [("x", x), ("w", w)] + ([("b", b)] if bias else [])
        write_case(name, "conv1d", {"stride": [s, 1], "padding": [p, 0], "dilation": [d, 1],
                                    "groups": g}, ins, y)
    c2 = [  # name, Cin, H, W, Cout, (Kh, Kw), stride, pad, dil, groups, bias
        ("conv2d", 3, 9, 11, 5, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
        ("conv2d_strided_dilated", 3, 13, 12, 4, (3, 3), (2, 2), (2, 2), (2, 2), 1, True),
        ("conv2d_rect_asym", 2, 7, 10, 3, (2, 5), (1, 3), (0, 2), (1, 1), 1, False),
        ("conv2d_grouped", 4, 8, 7, 6, (3, 2), (1, 1), (1, 0), (1, 1), 2, True),
        ("conv2d_depthwise", 6, 10, 9, 6, (3, 3), (2, 2), (1, 1), (1, 1), 6, True),
        ("conv2d_depthwise_mult", 3, 8, 8, 6, (3, 3), (1, 1), (2, 2), (2, 2), 3, False),
        ("conv2d_pointwise", 8, 5, 6, 7, (1, 1), (1, 1), (0, 0), (1, 1), 1, False),
        ("conv2d_patch", 3, 16, 16, 8, (4, 4), (4, 4), (0, 0), (1, 1), 1, True),
    ]
    for name, cin, H, W, cout, k, s, p, d, g, bias in c2:
        x, w, b = randn(cin, H, W), randn(cout, cin // g, *k), randn(cout)
        y = F.conv2d(x[None], w, b if bias else None, s, p, d, g)[0]
        ins = [("x", x), ("w", w)] + ([("b", b)] if bias else [])
        write_case(name, "conv2d", {"stride": list(s), "padding": list(p), "dilation": list(d),
                                    "groups": g}, ins, y)


def spatial():
    for name, shape, r in [("pixel_shuffle_r2", (8, 3, 5), 2), ("pixel_shuffle_r3", (18, 4, 3), 3)]:
        x = randn(*shape)
        write_case(name, "pixel_shuffle", {"upscale": r}, [("x", x)], F.pixel_shuffle(x[None], r)[0])
    pools = [  # name, shape, kind, kernel, stride, padding
        ("pool_max", (3, 9, 10), "max", (3, 3), (2, 2), (1, 1)),
        ("pool_max_rect", (2, 7, 8), "max", (2, 3), (2, 1), (0, 1)),
        ("pool_avg", (2, 8, 6), "avg", (2, 2), (2, 2), (0, 0)),
        ("pool_avg_padded", (2, 5, 5), "avg", (3, 3), (1, 1), (1, 1)),
    ]
    for name, shape, kind, k, s, p in pools:
        x = randn(*shape)
        fn = F.max_pool2d if kind == "max" else F.avg_pool2d
        y = fn(x[None], k, s, p)[0]
        write_case(name, "pool2d", {"pool": kind, "kernel": list(k), "stride": list(s),
                                    "padding": list(p)}, [("x", x)], y)
    x = randn(4, 7, 5)
    write_case("pool_global_avg", "pool2d", {"pool": "global_avg"}, [("x", x)],
               F.adaptive_avg_pool2d(x[None], 1)[0])


def tables_and_shapes():
    table, ids = randn(11, 6), torch.tensor([3, 0, 10, 3, 7, 1, 9], dtype=torch.int32)
    write_case("embedding", "embedding", {}, [("table", table), ("ids", ids)],
               F.embedding(ids.long(), table))
    a, b, c = randn(2, 3, 4), randn(2, 5, 4), randn(2, 1, 4)
    write_case("concat_axis1", "concat", {"axis": 1}, [("a", a), ("b", b), ("c", c)],
               torch.cat([a, b, c], dim=1))
    a, b = randn(3, 2), randn(4, 2)
    write_case("concat_axis0", "concat", {"axis": 0}, [("a", a), ("b", b)], torch.cat([a, b], 0))
    x = randn(4, 6, 5)
    write_case("slice_axis1", "slice", {"axis": 1, "start": 2, "end": 5}, [("x", x)], x[:, 2:5])
    write_case("transpose_01", "transpose", {"dim0": 0, "dim1": 1}, [("x", x)],
               x.transpose(0, 1).contiguous())
    write_case("reshape", "reshape", {"shape": [6, -1]}, [("x", x)], x.reshape(6, -1))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.bin"):
        old.unlink()
    torch.manual_seed(1234)
    np.random.seed(1234)
    for gen in (elementwise, norms, softmaxes, ropes, attentions, convs, spatial, tables_and_shapes):
        gen()
    files = sorted(OUT.glob("*.bin"))
    total = sum(f.stat().st_size for f in files)
    print(f"wrote {len(files)} cases, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
