#!/usr/bin/env python3
"""LLM prefill and decode speed: this engine against llama.cpp (PyPI llama-cpp-python), same
machine, same thread count, same GGUF file, in one run.

For every model and bit width it prints prefill tok/s (a 512-token prompt) and decode tok/s (128
greedy tokens, end-of-sequence ignored) of both engines and their ratio, plus this engine's bytes
read per decoded token, the fraction of the STREAM-triad bandwidth decode reaches and its peak
RSS. Each engine runs in its own process so neither's memory or threads affect the other.

Models:
  gemma3-270m   the real Gemma 3 270M (`npu model pull gemma3-270m`): its Q4_K_M file is the
                4-bit row; the 8-bit row is the same weights requantized to Q8_0 by llama.cpp.
  qwen3-0.6b    full-size Qwen3-0.6B architecture with random weights (no real weights are
                reachable): written as F16 GGUF by bench/make_random_gguf.py, quantized to Q8_0 and
                Q4_0 by llama.cpp's own quantizer, so both engines read the same bits.

Repeats: on a shared or virtual machine the speed of the whole machine swings between runs (up to
1.5x here), so a ratio of two runs taken seconds apart can be off by that much. `--repeats N` runs
each case as N back-to-back pairs (this engine and llama.cpp, the order alternating from pair to
pair) and reports the median of the per-pair ratios with their min-max spread; the tok/s columns
are then the medians of each side's N runs.

Usage (peers venv, see bench/requirements-peers.txt):
  /work/benchvenv/bin/python bench/llm_vs_llamacpp.py --npu build/src/cli/npu --threads 2 [--repeats 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def bench_prompt(vocab, n, bos):
    """The same ids `npu bench llm` uses (src/cli/cmd_bench_llm.cpp)."""
    ids = [bos] if bos is not None and bos >= 0 else []
    lo = min(1000, vocab // 2)
    span = max(1, vocab - lo)
    t = 0
    while len(ids) < n:
        ids.append(lo + (t * 7919) % span)
        t += 1
    return ids


def run_llamacpp(path, threads, prompt_tokens, gen_tokens):
    """Runs in a child process (this script with --child) and returns its JSON figures."""
    out = subprocess.run([sys.executable, __file__, "--child", path, "--threads", str(threads),
                          "--prompt-tokens", str(prompt_tokens), "--gen-tokens", str(gen_tokens)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def child(path, threads, prompt_tokens, gen_tokens):
    import numpy as np
    import resource
    from llama_cpp import Llama, llama_token_bos, llama_model_get_vocab

    ctx = prompt_tokens + gen_tokens + 16
    llm = Llama(model_path=path, n_ctx=ctx, n_batch=prompt_tokens, n_ubatch=prompt_tokens,
                n_threads=threads, n_threads_batch=threads, verbose=False)
    bos = llama_token_bos(llama_model_get_vocab(llm.model)) if llm.metadata.get(
        "tokenizer.ggml.add_bos_token", "true") != "false" else -1
    prompt = bench_prompt(llm.n_vocab(), prompt_tokens, bos)

    n_vocab = llm.n_vocab()

    def greedy():  # llama.cpp keeps only the last token's logits when logits_all is off
        return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))))

    # Warm-up: a short prompt and a few decode steps, then start over.
    llm.reset()
    llm.eval(prompt[:8])
    for _ in range(3):
        llm.eval([greedy()])
    llm.reset()

    t0 = time.perf_counter()
    llm.eval(prompt)
    prefill_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(gen_tokens):
        llm.eval([greedy()])
    decode_s = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"prefill_tok_s": prompt_tokens / prefill_s, "decode_tok_s": gen_tokens / decode_s,
                      "peak_rss_mib": peak_mib}))


def run_npu(npu, path, threads, prompt_tokens, gen_tokens):
    out = subprocess.run([npu, "--threads", str(threads), "bench", "llm", "--model", path, "--json",
                          "--prompt-tokens", str(prompt_tokens), "--gen-tokens", str(gen_tokens)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def quantize(src, dst, ftype_name):
    """llama.cpp's own quantizer (llama_model_quantize), so the peer defines the bits. Runs in a
    child process whose per-tensor log goes to dst + ".log"."""
    if os.path.exists(dst):
        return dst
    code = ("import sys, llama_cpp as l\n"
            "p = l.llama_model_quantize_default_params()\n"
            "p.ftype = getattr(l, 'LLAMA_FTYPE_MOSTLY_' + sys.argv[3]); p.allow_requantize = True\n"
            "sys.exit(l.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))\n")
    with open(dst + ".log", "w") as log:
        rc = subprocess.run([sys.executable, "-c", code, src, dst + ".tmp", ftype_name], stdout=log,
                            stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed for {src} -> {ftype_name} (see {dst}.log)")
    os.replace(dst + ".tmp", dst)
    return dst


def store_gguf(name):
    root = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "xdna-engine",
                        "models", name)
    if not os.path.isdir(root):
        return None
    for f in sorted(os.listdir(root)):
        if f.endswith(".gguf"):
            return os.path.join(root, f)
    return None


def summarize(model, bits, path, pairs):
    """One row from the pairs of a case. One pair: exactly that pair's figures (the output before
    --repeats existed). Several: each side's numeric figures are the medians over its runs, the
    ratios the median of the per-pair ratios, with their min and max and every pair kept."""
    if len(pairs) == 1:
        p = pairs[0]
        return {"model": model, "bits": bits, "gguf": path, "ours": p["ours"], "llama_cpp": p["llama_cpp"],
                "prefill_ratio": p["prefill_ratio"], "decode_ratio": p["decode_ratio"]}

    def medians(side):
        runs = [p[side] for p in pairs]
        return {k: statistics.median(r[k] for r in runs) for k, v in runs[0].items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}

    row = {"model": model, "bits": bits, "gguf": path, "ours": medians("ours"), "llama_cpp": medians("llama_cpp"),
           "repeats": len(pairs), "pairs": pairs}
    for k in ("prefill_ratio", "decode_ratio"):
        ratios = [p[k] for p in pairs]
        row[k] = statistics.median(ratios)
        row[k + "_min"], row[k + "_max"] = min(ratios), max(ratios)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npu", default="build/src/cli/npu")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--models", default="gemma3-270m,qwen3-0.6b")
    ap.add_argument("--workdir", default="/tmp/xdna-llm-bench", help="where the derived GGUF files go")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--repeats", type=int, default=1,
                    help="pairs of runs per case (engine and llama.cpp back to back, order alternating); "
                         "ratios are the median of the per-pair ratios")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.threads, a.prompt_tokens, a.gen_tokens)
        return
    if a.repeats < 1:
        sys.exit(f"--repeats must be >= 1 (got {a.repeats})")

    os.makedirs(a.workdir, exist_ok=True)
    cases = []  # (model, bits label, gguf path)
    for model in a.models.split(","):
        if model == "gemma3-270m":
            src = store_gguf("gemma3-270m")
            if not src:
                sys.exit("gemma3-270m is not in the model store: run `npu model pull gemma3-270m` first")
            cases.append((model, "8-bit (Q8_0)", quantize(src, os.path.join(a.workdir, "gemma3-270m-q8_0.gguf"), "Q8_0")))
            cases.append((model, "4-bit (Q4_K_M)", src))
        elif model == "qwen3-0.6b":
            f16 = os.path.join(a.workdir, "qwen3-0.6b-random-f16.gguf")
            if not os.path.exists(f16):
                subprocess.run([sys.executable, os.path.join(HERE, "make_random_gguf.py"), "--arch", "qwen3-0.6b",
                                "--out", f16], check=True)
            cases.append((model + " (random)", "8-bit (Q8_0)", quantize(f16, f16.replace("-f16", "-q8_0"), "Q8_0")))
            cases.append((model + " (random)", "4-bit (Q4_0)", quantize(f16, f16.replace("-f16", "-q4_0"), "Q4_0")))
        else:
            sys.exit(f"unknown model {model}")

    print(f"host measurements, {a.threads} threads, prompt {a.prompt_tokens} tokens, decode {a.gen_tokens} tokens"
          + (f", {a.repeats} interleaved pairs per case (medians; ratio = median of per-pair ratios)"
             if a.repeats > 1 else ""))
    hdr = (f"{'model':22} {'bits':15} {'prefill tok/s':>22} {'ratio':>6} {'decode tok/s':>20} {'ratio':>6}"
           f" {'MiB/token':>9} {'of triad':>8} {'peak RSS MiB':>13}")
    if a.repeats > 1:
        hdr += f" {'prefill spread':>15} {'decode spread':>14}"
    print(hdr)
    print(" " * 38 + f"{'ours':>10} {'llama.cpp':>11}" + " " * 7 + f"{'ours':>9} {'llama.cpp':>10}")
    rows = []
    for model, bits, path in cases:
        pairs = []
        for r in range(a.repeats):
            # Pair r runs both engines back to back; alternating who goes first cancels a steady drift.
            if r % 2 == 0:
                ref = run_llamacpp(path, a.threads, a.prompt_tokens, a.gen_tokens)
                ours = run_npu(a.npu, path, a.threads, a.prompt_tokens, a.gen_tokens)
            else:
                ours = run_npu(a.npu, path, a.threads, a.prompt_tokens, a.gen_tokens)
                ref = run_llamacpp(path, a.threads, a.prompt_tokens, a.gen_tokens)
            ours.pop("last_step", None)
            pairs.append({"ours": ours, "llama_cpp": ref,
                          "prefill_ratio": ours["prefill_tok_s"] / ref["prefill_tok_s"],
                          "decode_ratio": ours["decode_tok_s"] / ref["decode_tok_s"]})
        row = summarize(model, bits, path, pairs)
        rows.append(row)
        ours, ref = row["ours"], row["llama_cpp"]
        line = (f"{model:22} {bits:15} {ours['prefill_tok_s']:10.1f} {ref['prefill_tok_s']:11.1f} "
                f"{row['prefill_ratio']:5.2f}x {ours['decode_tok_s']:9.1f} {ref['decode_tok_s']:10.1f} "
                f"{row['decode_ratio']:5.2f}x {ours['bytes_per_token'] / 2**20:9.1f} "
                f"{100 * ours['decode_bandwidth_fraction']:7.0f}% {ours['peak_rss_mib']:13.0f}")
        if a.repeats > 1:
            line += (f" {row['prefill_ratio_min']:6.2f}-{row['prefill_ratio_max']:.2f}x"
                     f" {row['decode_ratio_min']:5.2f}-{row['decode_ratio_max']:.2f}x")
        print(line, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
