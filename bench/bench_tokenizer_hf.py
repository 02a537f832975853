#!/usr/bin/env python3
"""Peer for bench/bench_tokenizer.cpp: HF `tokenizers` encode throughput in CPU time (one thread, one line per
call, no special tokens) on tests/fixtures/tokenizers/corpus.jsonl.

  RAYON_NUM_THREADS=1 /work/venv/bin/python bench/bench_tokenizer_hf.py
"""
import json
import os
import time

from tokenizers import Tokenizer

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizers")
lines = [json.loads(l) for l in open(os.path.join(DIR, "corpus.jsonl"), encoding="utf-8")]
for name in ["minilm", "qwen2", "llama2", "unigram"]:
    tok = Tokenizer.from_file(os.path.join(DIR, f"{name}.tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    best = None
    for _ in range(5):
        t0 = time.process_time()
        n = sum(len(tok.encode(l, add_special_tokens=False).ids) for l in lines)
        dt = time.process_time() - t0
        best = dt if best is None else min(best, dt)
    print(f"{name:10s} {n / best / 1e6:6.2f} M tokens/s  ({best * 1e3:.1f} ms per corpus pass)")
