#!/usr/bin/env python3
"""Writes a full-size decoder with random weights as an F16 GGUF (PyPI `gguf` package), for speed
and memory benchmarks where no real weights are reachable. Both this engine and llama.cpp read the
file, so they do identical work on identical bits.

Architectures (the published configs; tensor names and metadata keys as llama.cpp's converter
writes them):
  qwen3-0.6b   Qwen/Qwen3-0.6B config.json: 28 layers, hidden 1024, 16 query heads / 8 KV heads
               of 128, MLP 3072, vocab 151936, rope theta 1e6, tied embeddings, QK-norm.

The vocabulary is synthetic (256 byte tokens + numbered tokens): enough for both engines to load
the file, not for text. Weights: N(0, 0.02) matrices, norm weights 1.

  python bench/make_random_gguf.py --arch qwen3-0.6b --out /tmp/qwen3-0.6b-random-f16.gguf

`--type q8_0` writes the matrices as Q8_0 through gguf-py's own quantizer (no llama.cpp build
needed: for benchmarks of this engine alone, e.g. `npu bench llm --device npu-sim`; the peer
comparison quantizes with llama.cpp's quantizer, bench/llm_vs_llamacpp.py).
"""
import argparse

import numpy as np
import gguf
import gguf.quants

ARCHS = {
    "qwen3-0.6b": dict(arch="qwen3", vocab=151936, hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128,
                       ffn=3072, ctx=40960, rope_theta=1e6, eps=1e-6, bos=151643, eos=151645),
}


def byte_level_tokens(vocab, specials):
    """GPT-2 byte-to-unicode alphabet first (so any text tokenizes), then numbered tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    tokens = [chr(c) for c in cs]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    while len(tokens) < vocab:
        i = len(tokens)
        if i in specials:
            tokens.append(specials[i])
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(f"tok{i}")
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="qwen3-0.6b", choices=sorted(ARCHS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--type", default="f16", choices=["f16", "q8_0"], help="the matrices' type")
    a = ap.parse_args()
    c = ARCHS[a.arch]
    rng = np.random.default_rng(a.seed)

    w = gguf.GGUFWriter(a.out, c["arch"])
    arch = c["arch"]
    w.add_name(f"{a.arch}-random")
    w.add_context_length(c["ctx"])
    w.add_embedding_length(c["hidden"])
    w.add_block_count(c["layers"])
    w.add_feed_forward_length(c["ffn"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if a.type == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0)

    tokens, types = byte_level_tokens(c["vocab"], {c["bos"]: "<|endoftext|>", c["eos"]: "<|im_end|>"})
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["t o", "to k"])
    w.add_bos_token_id(c["bos"])
    w.add_eos_token_id(c["eos"])
    w.add_add_bos_token(False)

    def mat(rows, cols):
        m = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)
        if a.type == "f16":
            return m
        return gguf.quants.quantize(m.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)

    def add_matrix(name, rows, cols):
        m = mat(rows, cols)
        w.add_tensor(name, m, raw_dtype=None if a.type == "f16" else gguf.GGMLQuantizationType.Q8_0)

    ones = lambda n: np.ones(n, dtype=np.float32)
    H, D, F = c["hidden"], c["head_dim"], c["ffn"]
    add_matrix("token_embd.weight", c["vocab"], H)
    w.add_tensor("output_norm.weight", ones(H))
    for i in range(c["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(H))
        add_matrix(p + "attn_q.weight", c["heads"] * D, H)
        add_matrix(p + "attn_k.weight", c["kv_heads"] * D, H)
        add_matrix(p + "attn_v.weight", c["kv_heads"] * D, H)
        add_matrix(p + "attn_output.weight", H, c["heads"] * D)
        w.add_tensor(p + "attn_q_norm.weight", ones(D))
        w.add_tensor(p + "attn_k_norm.weight", ones(D))
        w.add_tensor(p + "ffn_norm.weight", ones(H))
        add_matrix(p + "ffn_gate.weight", F, H)
        add_matrix(p + "ffn_up.weight", F, H)
        add_matrix(p + "ffn_down.weight", H, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(a.out)


if __name__ == "__main__":
    main()
