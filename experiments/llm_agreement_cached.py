#!/usr/bin/env python3
"""bench/llm_accuracy_vs_llamacpp.py's native comparison with llama.cpp's side computed once and
cached, so several engine builds can be compared against it on a loaded machine (llama.cpp's
greedy tokens do not depend on this engine).

  /work/benchvenv/bin/python experiments/llm_agreement_cached.py --cache /tmp/llama-native.json \
      --npu build-h/bin/npu [--npu other/npu ...]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import llm_accuracy_vs_llamacpp as acc  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True, help="llama.cpp's runs (made if missing)")
    ap.add_argument("--npu", action="append", default=[])
    ap.add_argument("--gguf", default=acc.DEFAULT_GGUF)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    with open(os.path.join(HERE, "..", "bench", "data", "llm_prompts.txt"), encoding="utf-8") as f:
        prompts = [l.rstrip("\n").replace("\\n", "\n") for l in f if l.strip()]
    if not os.path.exists(a.cache):
        runs, stops = acc.llamacpp_runs(a.gguf, prompts, a.max_tokens, a.threads)
        with open(a.cache, "w") as f:
            json.dump({"runs": runs, "stops": sorted(stops)}, f)
    with open(a.cache) as f:
        cached = json.load(f)
    ref, stops = cached["runs"], set(cached["stops"])
    for npu in a.npu:
        ours = acc.engine_runs(npu, a.gguf, prompts, a.max_tokens)
        agree, divs = 0, []
        for r, o in zip(ref, ours):
            same = r["prompt_ids"] == o["prompt_ids"]
            d = acc.first_divergence(r["tokens"], o["tokens"], stops) if same else 0
            agree += d is None and same
            divs.append("=" if d is None else str(d))
        print(f"{npu}: {agree} of {len(prompts)} identical; first divergences: {' '.join(divs)}", flush=True)


if __name__ == "__main__":
    main()
