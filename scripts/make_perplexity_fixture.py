#!/usr/bin/env python3
"""Writes tests/fixtures/llm/perplexity_tiny.json: transformers' perplexity of the tiny chat LLM
(tests/fixtures/llm/tiny-llama-chat, scripts/make_llm_fixtures.py) on a short text, computed the
way src/pipeline/perplexity.h and llama.cpp's llama-perplexity do: the text's ids (no BOS) are cut
into non-overlapping windows of CONTEXT tokens, the first id of each window is replaced by BOS, the
window runs from an empty cache and only its second half is scored;
perplexity = exp(mean -log p(token | window prefix)) over the scored tokens.

Fields: text, context, text_ids (the tokenizer's ids, for the engine's tokenizer to match),
windows, scored_tokens, window_nll (mean nll of each window's scored half), mean_nll, perplexity.

Needs torch, transformers (scripts/requirements.txt).
Usage: python scripts/make_perplexity_fixture.py
"""
import json
import math
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "tests", "fixtures", "llm", "tiny-llama-chat")
OUT = os.path.join(ROOT, "tests", "fixtures", "llm", "perplexity_tiny.json")
CONTEXT = 16

TEXT = (
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a "
    "single step. All that glitters is not gold; the early bird catches the worm, and a stitch "
    "in time saves nine. Numbers like 3.14159 and 2026 mix with words, punctuation (commas, "
    "semicolons!) and the occasional question: does it work?"
)


def main():
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    bos = tok.bos_token_id
    windows = len(ids) // CONTEXT
    assert windows >= 3, f"text too short: {len(ids)} ids"
    half = CONTEXT // 2
    window_nll = []
    for w in range(windows):
        window = list(ids[w * CONTEXT:(w + 1) * CONTEXT])
        window[0] = bos
        with torch.no_grad():
            logits = model(torch.tensor([window])).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        nll = [-logp[i - 1, window[i]].item() for i in range(half, CONTEXT)]
        window_nll.append(sum(nll) / half)
    mean_nll = sum(window_nll) / windows
    out = {"text": TEXT, "context": CONTEXT, "text_ids": ids, "windows": windows,
           "scored_tokens": windows * half, "window_nll": window_nll, "mean_nll": mean_nll,
           "perplexity": math.exp(mean_nll)}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(ids)} ids, {windows} windows, perplexity {out['perplexity']:.6f}")


if __name__ == "__main__":
    main()
