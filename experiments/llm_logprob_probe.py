#!/usr/bin/env python3
"""Probe: where do this engine's and llama.cpp's next-token distributions part on one prompt?

Runs one prompt greedily through llama.cpp (llama-cpp-python) and through `npu generate --json
--logprobs 5`, then prints per generated position (up to the first differing token): both top-1
ids, llama.cpp's top-1/top-2 log-prob margin, and the largest |log-prob difference| between the
engines over llama.cpp's top 5 (0 = identical distributions). Position 0 comes from the prefill,
the rest from decode steps.

  /work/benchvenv/bin/python experiments/llm_logprob_probe.py --npu build-h/bin/npu --prompt-index 14
"""
import argparse
import json
import os
import subprocess

import numpy as np
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
GGUF = os.path.expanduser("~/.cache/xdna-engine/models/gemma3-270m/gemma-3-270m-q4_k_m.gguf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--npu", required=True)
    ap.add_argument("--gguf", default=GGUF)
    ap.add_argument("--prompt-index", type=int, default=14, help="1-based line of bench/data/llm_prompts.txt")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    with open(os.path.join(HERE, "..", "bench", "data", "llm_prompts.txt"), encoding="utf-8") as f:
        prompt = [l.rstrip("\n").replace("\\n", "\n") for l in f if l.strip()][a.prompt_index - 1]

    llm = Llama(model_path=a.gguf, n_ctx=512, n_batch=512, n_threads=a.threads, n_threads_batch=a.threads,
                verbose=False)
    ids = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
    llm.eval(ids)
    ref = []  # per position: log-softmax over the vocabulary
    for _ in range(a.tokens):
        z = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float64)
        lp = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
        ref.append(lp)
        llm.eval([int(np.argmax(lp))])

    cmd = [a.npu, "--threads", str(a.threads), "generate", "--model", a.gguf, "--prompt", prompt, "--json",
           "--temperature", "0", "--repeat-penalty", "1", "--max-tokens", str(a.tokens), "--context", "512",
           "--logprobs", "5"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    print(f"prompt {a.prompt_index}: {prompt!r}  ({len(ids)} ids)")
    print("pos  llama.cpp  engine  llama top1-top2 margin  max|dlogprob| over llama's top 5")
    for i, (lp, c) in enumerate(zip(ref, out["logprobs"])):
        top = np.argsort(-lp)[:5]
        ours = {t["id"]: t["logprob"] for t in c["top"]}
        ours[c["id"]] = c["logprob"]
        diffs = [abs(lp[t] - ours[int(t)]) for t in top if int(t) in ours]
        print(f"{i:3d}  {int(top[0]):9d}  {c['id']:6d}  {lp[top[0]] - lp[top[1]]:8.4f}  "
              f"{max(diffs) if diffs else float('nan'):8.4f}")
        if int(top[0]) != c["id"]:
            print("     (first differing token: later positions have different contexts)")
            break


if __name__ == "__main__":
    main()
