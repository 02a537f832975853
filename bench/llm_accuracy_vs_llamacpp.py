#!/usr/bin/env python3
"""Greedy continuations: this engine against llama.cpp (PyPI llama-cpp-python) on the same GGUF.

For each of the prompts in bench/data/llm_prompts.txt (one a line; "\\n" in a line is a newline)
both engines tokenize the prompt (BOS as the GGUF says, special-token text parsed), then pick the
arg-max token 64 times (no repetition penalty, no sampling), stopping early only at an
end-of-sequence / end-of-turn token. The script prints, per prompt and per model file, whether the
prompt ids and the continuations agree and the first position where they differ.

Model files:
  f32     the GGUF rewritten with every tensor dequantized to F32 by the PyPI `gguf` package
          (gguf.quants.dequantize; all metadata kept), so both engines compute from the same
          real-valued weights and only arithmetic order differs. Target: >= 19 of 20 identical.
  native  the GGUF as distributed (Gemma 3 270M: Q4_K_M). Each engine runs its own kernels (this
          engine computes q5_0 as its exact q8_0 form and rounds x to int8 per 32 values;
          llama.cpp rounds x to q8_0 / q8_K blocks), so later tokens may drift apart. Expected: >= 15 of 20.

Rounding x to 8 bits makes each engine's logits move by ~0.1-0.2 nats from the exact result, in a
way that any tiny upstream difference reshuffles. --llamacpp-configs runs llama.cpp under several
configurations that are exact in real arithmetic (its default; norepack: no CPU "extra buffer
types", so q4_K is not repacked to q4_K_8x8; kvf32: f32 KV cache instead of f16; norepack-kvf32)
and reports this engine against each plus llama.cpp's default against the others: how often
llama.cpp agrees with itself is the ceiling a bit-inexact engine can expect.

Usage (llama-cpp-python lives in /work/benchvenv; the dequantization needs gguf >= 0.19 under
numpy 2, see --gguf-python):
  /work/benchvenv/bin/python bench/llm_accuracy_vs_llamacpp.py --npu build/src/cli/npu \
      [--llamacpp-configs default,norepack,kvf32] [--engine-kv-type f16]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_GGUF = os.path.expanduser("~/.cache/xdna-engine/models/gemma3-270m/gemma-3-270m-q4_k_m.gguf")
DEFAULT_F32 = os.path.expanduser("~/.cache/xdna-engine/derived/gemma-3-270m-f32.gguf")
# The end-of-turn tokens this engine stops at besides the GGUF's eos / eot ids (src/pipeline/llm.cpp).
STOP_TEXTS = ["<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>"]
# llama.cpp configurations (make_llama's arguments); all compute the same model in real arithmetic.
LLAMACPP_CONFIGS = {"default": {}, "norepack": {"repack": False}, "kvf32": {"kv_f32": True},
                    "norepack-kvf32": {"repack": False, "kv_f32": True}}


def dequantize_gguf(src, dst, keep=()):
    """Writes `dst`: `src` with every tensor as F32 (those whose GGML type name is in `keep`, e.g.
    "Q4_K", stay as they are) and every metadata key copied."""
    import numpy as np
    import gguf

    reader = gguf.GGUFReader(src)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    writer = gguf.GGUFWriter(dst + ".tmp", arch)
    skip = {"general.architecture", "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
    for name, field in reader.fields.items():
        if name in skip:
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                val = [field.parts[i][0].item() for i in field.data]
            writer.add_key_value(name, val, vtype)
        elif vtype == gguf.GGUFValueType.STRING:
            writer.add_key_value(name, bytes(field.parts[field.data[0]]).decode("utf-8"), vtype)
        else:
            writer.add_key_value(name, field.parts[field.data[0]][0].item(), vtype)
    for t in reader.tensors:
        if t.tensor_type.name in keep:  # raw blocks; the writer derives the shape from their bytes
            writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
            continue
        shape = [int(d) for d in reversed(t.shape)]  # numpy order (GGUF lists ne0 first)
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        writer.add_tensor(t.name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(dst + ".tmp", dst)


def read_prompts(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").replace("\\n", "\n") for line in f if line.strip()]


def make_llama(path, threads, repack=True, kv_f32=False, **kw):
    """llama.cpp on `path`. repack=False sets the model parameter use_extra_bufts = false (no CPU
    "extra buffer types": q4_K weights are then not repacked to q4_K_8x8 for its tiled kernels);
    kv_f32 makes the KV cache f32 (llama.cpp's default is f16)."""
    import llama_cpp
    from llama_cpp import Llama

    lib = llama_cpp.llama_cpp
    default_params = lib.llama_model_default_params
    if not repack:  # Llama() takes no such argument; it reads the defaults through this function
        def no_extra_bufts():
            p = default_params()
            p.use_extra_bufts = False
            return p
        lib.llama_model_default_params = no_extra_bufts
    if kv_f32:
        kw.update(type_k=lib.GGML_TYPE_F32, type_v=lib.GGML_TYPE_F32)
    try:
        return Llama(model_path=path, n_ctx=kw.pop("n_ctx", 512), n_batch=kw.pop("n_batch", 512),
                     n_threads=threads, n_threads_batch=threads, verbose=kw.pop("verbose", False), **kw)
    finally:
        lib.llama_model_default_params = default_params


def llamacpp_runs(path, prompts, max_tokens, threads, repack=True, kv_f32=False):
    import numpy as np

    llm = make_llama(path, threads, repack=repack, kv_f32=kv_f32)
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "true") != "false"
    stops = {llm.token_eos()}
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        if key in llm.metadata:
            stops.add(int(llm.metadata[key]))
    for text in STOP_TEXTS:
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        if len(ids) == 1:
            stops.add(ids[0])
    n_vocab = llm.n_vocab()
    runs = []
    for prompt in prompts:
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)
        llm.reset()
        llm.eval(ids)
        out = []
        while len(out) < max_tokens:
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))
            tok = int(np.argmax(logits))
            out.append(tok)
            if tok in stops:
                break
            llm.eval([tok])
        runs.append({"prompt_ids": ids, "tokens": out})
        print(f"  llama.cpp {len(runs)}/{len(prompts)}", file=sys.stderr, flush=True)
    return runs, stops


def engine_runs(npu, path, prompts, max_tokens, kv_type=None):
    runs = []
    for prompt in prompts:
        cmd = [npu, "generate", "--model", path, "--prompt", prompt, "--json", "--temperature", "0",
               "--repeat-penalty", "1", "--seed", "0", "--max-tokens", str(max_tokens), "--context", "512"]
        if kv_type:
            cmd += ["--kv-type", kv_type]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        runs.append({"prompt_ids": r["prompt_ids"], "tokens": r["tokens"], "text": r["text"]})
        print(f"  engine {len(runs)}/{len(prompts)}", file=sys.stderr, flush=True)
    return runs


def first_divergence(a, b, stops):
    """Index of the first differing token, or None. A stop token ends a sequence: the engine may
    leave it out of its output while llama.cpp's loop keeps it."""
    a = a[:-1] if a and a[-1] in stops else a
    b = b[:-1] if b and b[-1] in stops else b
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def agreement(a, b, stops):
    """(identical continuations, first divergence per prompt) of two lists of runs."""
    agree, divs = 0, []
    for r, o in zip(a, b):
        same = r["prompt_ids"] == o["prompt_ids"]
        d = first_divergence(r["tokens"], o["tokens"], stops) if same else 0
        agree += d is None and same
        divs.append(d)
    return agree, divs


def compare(label, path, prompts, args, configs=("default",)):
    print(f"== {label}: {path}", flush=True)
    refs = {}
    for c in configs:
        refs[c], stops = llamacpp_runs(path, prompts, args.max_tokens, args.threads, **LLAMACPP_CONFIGS[c])
    ours = engine_runs(args.npu, path, prompts, args.max_tokens, args.engine_kv_type)
    out = compare_runs(label, path, prompts, refs[configs[0]], ours, stops)
    if len(configs) > 1:
        out["configs"] = {}
        for c in configs:
            n, divs = agreement(refs[c], ours, stops)
            row = {"engine_identical": n, "engine_first_divergence": divs}
            if c != configs[0]:
                row["llamacpp_identical_to_" + configs[0]], row["llamacpp_first_divergence"] = \
                    agreement(refs[configs[0]], refs[c], stops)
            out["configs"][c] = row
            print(f"{label}, llama.cpp {c}: engine {n} of {len(prompts)} identical ("
                  f"{' '.join('=' if d is None else str(d) for d in divs)})"
                  + (f"; llama.cpp {configs[0]} vs {c}: {row['llamacpp_identical_to_' + configs[0]]} of "
                     f"{len(prompts)}" if c != configs[0] else ""), flush=True)
    return out


def compare_runs(label, path, prompts, ref, ours, stops):
    rows, agree = [], 0
    for i, (p, r, o) in enumerate(zip(prompts, ref, ours)):
        same_prompt = r["prompt_ids"] == o["prompt_ids"]
        div = first_divergence(r["tokens"], o["tokens"], stops) if same_prompt else 0
        agree += div is None and same_prompt
        rows.append({"prompt": p, "prompt_ids_equal": same_prompt, "llamacpp_tokens": len(r["tokens"]),
                     "engine_tokens": len(o["tokens"]), "first_divergence": div,
                     "engine_text": o["text"]})
        print(f"{i + 1:2d}  prompt ids {'same' if same_prompt else 'DIFFER'}  "
              f"tokens {len(r['tokens']):2d}/{len(o['tokens']):2d}  "
              f"first divergence: {'none' if div is None else div:>4}  {p[:40]!r}", flush=True)
    print(f"{label}: {agree} of {len(prompts)} continuations identical", flush=True)
    return {"file": path, "identical": agree, "prompts": len(prompts), "rows": rows}


def llamacpp_perplexity(path, text_path, context, threads, max_windows=0):
    """llama.cpp's perplexity with llama-perplexity's method (the one `npu perplexity` uses):
    windows of `context` tokens, first token BOS, second half scored."""
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=context, n_batch=context, n_ubatch=context, n_threads=threads,
                n_threads_batch=threads, logits_all=True, verbose=False)
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "true") != "false"
    with open(text_path, encoding="utf-8") as f:
        ids = llm.tokenize(f.read().encode("utf-8"), add_bos=False, special=False)
    windows = len(ids) // context
    if max_windows:
        windows = min(windows, max_windows)
    half, nll = context // 2, 0.0
    for w in range(windows):
        window = ids[w * context:(w + 1) * context]
        if add_bos:
            window[0] = llm.token_bos()
        llm.reset()
        llm.eval(window)
        logits = np.asarray(llm.scores[half - 1:context - 1], dtype=np.float64)
        m = logits.max(axis=1, keepdims=True)
        logz = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1)))
        nll += float((logz - logits[np.arange(half), window[half:]]).sum())
    return {"text_tokens": len(ids), "windows": windows, "perplexity": float(np.exp(nll / (windows * half)))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npu", default=os.path.join(HERE, "..", "build", "src", "cli", "npu"))
    ap.add_argument("--gguf", default=DEFAULT_GGUF, help="the native GGUF")
    ap.add_argument("--f32", default=DEFAULT_F32, help="where the dequantized F32 GGUF goes (made once)")
    ap.add_argument("--prompts", default=os.path.join(HERE, "data", "llm_prompts.txt"))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=["f32", "native"], help="run one of the two files")
    ap.add_argument("--gguf-python", default=sys.executable,
                    help="Python with gguf >= 0.19 (or gguf 0.10 and numpy < 2), for the dequantization")
    ap.add_argument("--llamacpp-configs", default="default",
                    help="native file: comma-separated llama.cpp configurations, the first the reference "
                         f"({', '.join(LLAMACPP_CONFIGS)})")
    ap.add_argument("--engine-kv-type", choices=["f32", "f16", "bf16"], help="this engine's --kv-type")
    ap.add_argument("--json-out", help="write the per-prompt results here")
    ap.add_argument("--perplexity", metavar="TEXT",
                    help="instead: llama.cpp's perplexity of the f32 and native files on TEXT")
    ap.add_argument("--context", type=int, default=512, help="perplexity window")
    ap.add_argument("--chunks", type=int, default=0, help="perplexity: at most this many windows")
    ap.add_argument("--dequantize", nargs=2, metavar=("SRC", "DST"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    configs = tuple(args.llamacpp_configs.split(","))
    unknown = [c for c in configs if c not in LLAMACPP_CONFIGS]
    if unknown:
        ap.error(f"unknown --llamacpp-configs {unknown}; known: {', '.join(LLAMACPP_CONFIGS)}")
    if args.dequantize:
        dequantize_gguf(*args.dequantize)
        return

    if args.perplexity:
        for label, path in (("f32", args.f32), ("native", args.gguf)):
            if args.only and args.only != label:
                continue
            r = llamacpp_perplexity(path, args.perplexity, args.context, args.threads, args.chunks)
            print(f"llama.cpp {label}: perplexity {r['perplexity']:.4f} ({r['windows']} windows of "
                  f"{args.context}, text {r['text_tokens']} tokens)", flush=True)
        return
    prompts = read_prompts(args.prompts)
    results = {}
    if args.only != "native":
        if not os.path.exists(args.f32):
            os.makedirs(os.path.dirname(os.path.abspath(args.f32)), exist_ok=True)
            print(f"dequantizing {args.gguf} -> {args.f32}", flush=True)
            subprocess.run([args.gguf_python, __file__, "--dequantize", args.gguf, args.f32], check=True)
        results["f32"] = compare("f32 (dequantized)", args.f32, prompts, args)
    if args.only != "f32":
        results["native"] = compare("native", args.gguf, prompts, args, configs)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, ensure_ascii=False)
    for label, r in results.items():
        print(f"{label}: {r['identical']}/{r['prompts']} identical")


if __name__ == "__main__":
    main()
