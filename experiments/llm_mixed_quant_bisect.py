#!/usr/bin/env python3
"""Which GGML weight type makes this engine and llama.cpp part on the native Gemma 3 Q4_K_M file?

Writes GGUFs that keep only the tensors of one GGML type quantized (the rest dequantized to F32 by
gguf-py, which matches llama.cpp's own dequantizers bit for bit) and compares both engines'
next-token log-probabilities after each prompt (position 0): the largest |difference| over
llama.cpp's top 5, per prompt, and the median. The f32 file (keep nothing) and the native file
(keep all) are the controls.

  /tmp/venv-with-gguf-0.19/bin/python ... (the writer needs gguf >= 0.19 under numpy 2)
  /work/benchvenv/bin/python experiments/llm_mixed_quant_bisect.py --npu build/bin/npu \
      --dir /tmp/mixed [--keep Q4_K,Q6_K,Q5_0,Q8_0] [--gguf-python PY]
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
sys.path.insert(0, HERE)
import llm_accuracy_vs_llamacpp as acc  # noqa: E402
import llamacpp_native_variants as var  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npu", required=True)
    ap.add_argument("--dir", required=True, help="where the mixed GGUFs go (made if missing, ~0.3-1 GB each)")
    ap.add_argument("--keep", default="Q4_K,Q6_K,Q5_0,Q8_0", help="one file per type; 'all' = native")
    ap.add_argument("--gguf-python", default=sys.executable)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kv-f32", action="store_true", help="llama.cpp with an f32 KV cache")
    ap.add_argument("--repack", type=int, default=1, help="0: llama.cpp without extra buffer types")
    a = ap.parse_args()
    prompts = acc.read_prompts(os.path.join(HERE, "..", "bench", "data", "llm_prompts.txt"))
    for keep in a.keep.split(","):
        if keep == "all":
            path = acc.DEFAULT_GGUF
        else:
            path = os.path.join(a.dir, f"keep-{keep}.gguf")
            if not os.path.exists(path):
                os.makedirs(a.dir, exist_ok=True)
                subprocess.run([a.gguf_python, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import "
                                "llm_accuracy_vs_llamacpp as a; a.dequantize_gguf(sys.argv[2], sys.argv[3], "
                                "keep=(sys.argv[4],))", os.path.join(HERE, "..", "bench"), acc.DEFAULT_GGUF,
                                path, keep], check=True)
        ref = var.llamacpp_logprobs(path, prompts, a.threads, repack=bool(a.repack), kv_f32=a.kv_f32)
        ours = var.engine_logprobs(a.npu, path, prompts, a.threads, None)
        diffs, flips = [], 0
        for lp, o in zip(ref, ours):
            top = np.argsort(-lp)[:5]
            diffs.append(max(abs(lp[t] - o[int(t)]) for t in top if int(t) in o))
            flips += max(o, key=o.get) != int(top[0])
        print(f"keep {keep:5s}: median {np.median(diffs):.4f}  max {max(diffs):.4f}  top-1 differs on "
              f"{flips} of {len(prompts)}  per prompt: {' '.join(f'{d:.3f}' for d in diffs)}", flush=True)


if __name__ == "__main__":
    main()
