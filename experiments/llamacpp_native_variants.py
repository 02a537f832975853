#!/usr/bin/env python3
"""Which part of llama.cpp's native (Q4_K_M) path moves its logits away from the same weights in f32?

For each prompt of bench/data/llm_prompts.txt, takes the next-token log-probabilities after the
prompt (position 0, from the prefill) under several llama.cpp configurations and, with --npu, this
engine's, and prints the largest |log-prob difference| over the f32 reference's top 5 for each
against llama.cpp on the f32 GGUF (made by `bench/llm_accuracy_vs_llamacpp.py --dequantize`;
llama.cpp's own dequantizers give a bit-identical file, see docs/benchmarks-llm.md).

Configurations (llama-cpp-python 0.3.36):
  native           Q4_K_M, defaults (CPU "extra buffer types": q4_K weights repacked to q4_K_8x8)
  native-norepack  Q4_K_M, model param use_extra_bufts = false (no repacking)
  native-kvf32     Q4_K_M, defaults but type_k / type_v = f32 (llama.cpp's default KV is f16)

  /work/benchvenv/bin/python experiments/llamacpp_native_variants.py --npu build/bin/npu --threads 1
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import llm_accuracy_vs_llamacpp as acc  # noqa: E402


def llamacpp_logprobs(path, prompts, threads, **cfg):
    from llama_cpp import Llama
    llm = acc.make_llama(path, threads, **cfg)
    out = []
    for p in prompts:
        ids = llm.tokenize(p.encode("utf-8"), add_bos=True, special=True)
        llm.reset()
        llm.eval(ids)
        z = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float64)
        out.append(z - (z.max() + np.log(np.exp(z - z.max()).sum())))
    del llm
    return out


def engine_logprobs(npu, path, prompts, threads, kv_type):
    out = []
    for p in prompts:
        cmd = [npu, "--threads", str(threads), "generate", "--model", path, "--prompt", p, "--json",
               "--temperature", "0", "--repeat-penalty", "1", "--max-tokens", "1", "--context", "512",
               "--logprobs", "20"]
        if kv_type:
            cmd += ["--kv-type", kv_type]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        c = r["logprobs"][0]
        d = {t["id"]: t["logprob"] for t in c["top"]}
        d[c["id"]] = c["logprob"]
        out.append(d)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=acc.DEFAULT_GGUF)
    ap.add_argument("--f32", default=acc.DEFAULT_F32)
    ap.add_argument("--npu", help="also this engine on the native file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--configs", default="native,native-norepack,native-kvf32")
    a = ap.parse_args()
    prompts = acc.read_prompts(os.path.join(HERE, "..", "bench", "data", "llm_prompts.txt"))
    ref = llamacpp_logprobs(a.f32, prompts, a.threads)
    cols = {}
    for c in a.configs.split(","):
        cfg = {"native": {}, "native-norepack": {"repack": False},
               "native-kvf32": {"kv_f32": True}, "native-norepack-kvf32": {"repack": False, "kv_f32": True},
               "native-2t": {"threads": 2}}[c]
        th = cfg.pop("threads", a.threads)
        cols["llama " + c] = [dict(enumerate(lp)) for lp in llamacpp_logprobs(a.gguf, prompts, th, **cfg)]
    if a.npu:
        cols["engine native"] = engine_logprobs(a.npu, a.gguf, prompts, a.threads, None)
        cols["engine native kv f16"] = engine_logprobs(a.npu, a.gguf, prompts, a.threads, "f16")
    print("max |dlogprob| vs llama.cpp f32 over its top 5, position 0; '*' = top-1 differs from f32's")
    print(" #  f32 margin  " + "  ".join(f"{k:>22s}" for k in cols))
    tot = {k: [] for k in cols}
    for i, lp in enumerate(ref):
        top = np.argsort(-lp)[:5]
        row = []
        for k, v in cols.items():
            d = max(abs(lp[t] - v[i][int(t)]) for t in top if int(t) in v[i])
            best = max(v[i], key=v[i].get)
            tot[k].append(d)
            row.append(f"{d:21.4f}{'*' if best != int(top[0]) else ' '}")
        print(f"{i + 1:2d}  {lp[top[0]] - lp[top[1]]:10.4f}  " + "  ".join(row))
    print("median      " + "  ".join(f"{np.median(v):22.4f}" for v in tot.values()))


if __name__ == "__main__":
    main()
