#!/usr/bin/env python3
"""How often does llama.cpp agree with itself on the native Q4_K_M file when only a detail that is
exact in real arithmetic changes? Runs the 20 greedy 64-token continuations of
bench/llm_accuracy_vs_llamacpp.py under several llama.cpp configurations (cached as JSON in
--dir, one file per configuration) and, with --npu, this engine's (f32 and f16 KV cache), then
prints the number of identical continuations and the first divergences for every pair against
each llama.cpp configuration.

Configurations: default (1 thread), norepack (use_extra_bufts = false: q4_K not repacked to
q4_K_8x8), kvf32 (f32 KV cache instead of f16), t2 (2 threads).

  /work/benchvenv/bin/python experiments/llamacpp_self_agreement.py --dir /tmp/self --npu build/bin/npu
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import llm_accuracy_vs_llamacpp as acc  # noqa: E402

CONFIGS = {"default": {}, "norepack": {"repack": False}, "kvf32": {"kv_f32": True},
           "norepack-kvf32": {"repack": False, "kv_f32": True}, "t2": {"threads": 2}}


def engine_runs(npu, path, prompts, max_tokens, kv_type):
    runs = []
    for p in prompts:
        cmd = [npu, "--threads", "1", "generate", "--model", path, "--prompt", p, "--json", "--temperature", "0",
               "--repeat-penalty", "1", "--seed", "0", "--max-tokens", str(max_tokens), "--context", "512",
               "--kv-type", kv_type]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        runs.append({"prompt_ids": r["prompt_ids"], "tokens": r["tokens"]})
    return runs


def cached(path, make):
    if not os.path.exists(path):
        runs = make()
        with open(path, "w") as f:
            json.dump(runs, f)
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="cache of the runs (one JSON per configuration)")
    ap.add_argument("--gguf", default=acc.DEFAULT_GGUF)
    ap.add_argument("--configs", default="default,norepack,kvf32,t2")
    ap.add_argument("--npu", help="this engine too (runs with --threads 1, KV f32 and f16)")
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    prompts = acc.read_prompts(os.path.join(HERE, "..", "bench", "data", "llm_prompts.txt"))
    runs, stops = {}, set()
    for c in a.configs.split(","):
        cfg = dict(CONFIGS[c])
        threads = cfg.pop("threads", 1)

        def make(cfg=cfg, threads=threads):
            r, s = acc.llamacpp_runs(a.gguf, prompts, a.max_tokens, threads, **cfg)
            return {"runs": r, "stops": sorted(s)}
        got = cached(os.path.join(a.dir, f"llama-{c}.json"), make)
        runs[f"llama {c}"] = got["runs"]
        stops |= set(got["stops"])
    if a.npu:
        for kv in ("f32", "f16"):
            runs[f"engine kv {kv}"] = cached(os.path.join(a.dir, f"engine-kv{kv}.json"),
                                             lambda kv=kv: engine_runs(a.npu, a.gguf, prompts, a.max_tokens, kv))
    names = list(runs)
    for i, x in enumerate(names):
        if not x.startswith("llama"):
            continue
        for y in names[i + 1:]:
            agree, divs = 0, []
            for r, o in zip(runs[x], runs[y]):
                same = r["prompt_ids"] == o["prompt_ids"]
                d = acc.first_divergence(r["tokens"], o["tokens"], stops) if same else 0
                agree += d is None and same
                divs.append("=" if d is None else str(d))
            print(f"{x:>22s} vs {y:<22s} {agree:2d} of {len(prompts)} identical; first divergences: "
                  f"{' '.join(divs)}", flush=True)


if __name__ == "__main__":
    main()
