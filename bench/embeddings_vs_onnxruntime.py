#!/usr/bin/env python3
"""Sentence embeddings per second: this engine against ONNX Runtime, side by side in one run.

Same model (all-MiniLM-L6-v2 as `npu model pull` stores it), same token ids, same thread count,
f32 and int8, for batch 1 x 16 tokens, batch 1 x 128 tokens and batch 32 x 128 tokens.

  python -m venv /work/benchvenv && /work/benchvenv/bin/pip install -r bench/requirements-peers.txt
  build/bin/npu model pull all-minilm-l6-v2
  /work/benchvenv/bin/python bench/embeddings_vs_onnxruntime.py --npu build/bin/npu

What is timed, on both sides: one call from token ids to pooled, L2-normalised embeddings
(tokenization excluded on both). The engine is timed in-process by `npu bench embed` (no process
start-up in the figures); ONNX Runtime by InferenceSession.run plus the mean pooling in numpy.
Median of --iters calls after --warmup untimed calls. The rows alternate engine / ORT so that
both see the same machine load.

Peers: the ONNX file is torch.onnx.export of transformers' BertModel from the same safetensors;
ORT runs it with its default full graph optimisation (its own LayerNorm/GELU/attention fusions).
int8: onnxruntime.quantization.quantize_dynamic (int8 weights, activations quantised per call)
against `npu checkpoint bake --precision int8`.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

SHAPES = [(1, 16), (1, 128), (32, 128)]


def body_id(b, t, vocab):
    """Same formula as src/cli/cmd_bench_embed.cpp's body_id."""
    lo = min(1000, vocab // 2)
    span = max(1, vocab - lo)
    return lo + ((b * 131 + t) * 7919) % span


def make_ids(batch, tokens, vocab, cls_id, sep_id):
    ids = np.empty((batch, tokens), dtype=np.int64)
    for b in range(batch):
        ids[b, 0] = cls_id
        ids[b, 1:tokens - 1] = [body_id(b, t, vocab) for t in range(tokens - 2)]
        ids[b, tokens - 1] = sep_id
    return ids


def export_onnx(model_dir, out_path):
    """torch.onnx.export of the checkpoint's BertModel, batch and sequence dynamic."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    ids = torch.ones((2, 16), dtype=torch.int64)
    mask = torch.ones((2, 16), dtype=torch.int64)
    types = torch.zeros((2, 16), dtype=torch.int64)
    batch, seq = torch.export.Dim("batch", max=1024), torch.export.Dim("seq", max=512)
    dyn = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq},
           "token_type_ids": {0: batch, 1: seq}}
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask, types), out_path, dynamo=True,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], dynamic_shapes=dyn,
                          external_data=False)


def quantize_int8(f32_path, out_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantize_dynamic(f32_path, out_path, weight_type=QuantType.QInt8)


def ort_session(path, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_embed(sess, ids):
    mask = np.ones_like(ids)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
    hidden = sess.run(None, feeds)[0]
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def time_ort(sess, ids, iters, warmup):
    for _ in range(warmup):
        out = ort_embed(sess, ids)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = ort_embed(sess, ids)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def time_engine(npu, model, batch, tokens, iters, warmup, threads):
    cmd = [npu, "--threads", str(threads), "bench", "embed", "--model", model, "--batch", str(batch),
           "--tokens", str(tokens), "--iters", str(iters), "--warmup", str(warmup), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"engine failed: {' '.join(cmd)}\n{r.stderr}")
    return json.loads(r.stdout)


def lscpu_model():
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--npu", default=os.path.join(here, "..", "build", "bin", "npu"))
    ap.add_argument("--model-dir", default=os.path.expanduser("~/.cache/xdna-engine/models/all-minilm-l6-v2"))
    ap.add_argument("--work-dir", default="/tmp/xdna-bench-embed", help="ONNX exports and the baked int8 model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20, help="timed calls per batch-1 row")
    ap.add_argument("--iters-batched", type=int, default=5, help="timed calls per batch-32 row")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--precisions", default="f32,int8")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()

    import onnxruntime as ort
    from transformers import AutoTokenizer

    os.makedirs(a.work_dir, exist_ok=True)
    f32_onnx = os.path.join(a.work_dir, "minilm-f32.onnx")
    int8_onnx = os.path.join(a.work_dir, "minilm-int8.onnx")
    int8_baked = os.path.join(a.work_dir, "minilm-int8.xdna")
    if not os.path.exists(f32_onnx):
        print(f"exporting {a.model_dir} -> {f32_onnx}", file=sys.stderr)
        export_onnx(a.model_dir, f32_onnx)
    if not os.path.exists(int8_onnx):
        quantize_int8(f32_onnx, int8_onnx)
    if not os.path.exists(int8_baked):
        r = subprocess.run([a.npu, "checkpoint", "bake", a.model_dir, "-o", int8_baked, "--precision", "int8"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"npu checkpoint bake failed:\n{r.stderr}")

    tok = AutoTokenizer.from_pretrained(a.model_dir)
    frame = tok("")["input_ids"]  # [CLS] [SEP]
    vocab = tok.vocab_size
    models = {"f32": (a.model_dir, f32_onnx), "int8": (int8_baked, int8_onnx)}

    def load():
        return os.getloadavg()[0]

    env = {"cpu": lscpu_model(), "threads": a.threads, "onnxruntime": ort.__version__,
           "python": platform.python_version(), "iters": a.iters, "iters_batched": a.iters_batched, "warmup": a.warmup,
           "load_1min_start": load()}
    print(f"CPU {env['cpu']}; {a.threads} threads each; onnxruntime {ort.__version__}; "
          f"median of {a.iters} (batch 1) / {a.iters_batched} (batch 32) calls after {a.warmup} warm-up; load average {env['load_1min_start']:.2f}")
    print(f"{'precision':9s} {'batch x tokens':>14s} {'engine sent/s':>14s} {'ORT sent/s':>11s} "
          f"{'engine/ORT':>10s} {'cos(e,ORT)':>10s} {'cos(e,f32)':>10s} {'cos(ORT,f32)':>12s}")
    rows = []
    reference = ort_session(f32_onnx, a.threads)  # f32 ORT: what both int8 paths are compared to
    for prec in a.precisions.split(","):
        engine_model, onnx_path = models[prec]
        sess = ort_session(onnx_path, a.threads)
        for batch, tokens in SHAPES:
            ids = make_ids(batch, tokens, vocab, frame[0], frame[-1])
            iters = a.iters if batch == 1 else a.iters_batched
            e = time_engine(a.npu, engine_model, batch, tokens, iters, a.warmup, a.threads)
            if e["input_ids_0"] != ids[0].tolist():
                sys.exit("engine and ORT inputs differ: check body_id in both")
            ort_s, ort_out = time_ort(sess, ids, iters, a.warmup)
            ev = np.asarray(e["embedding_0"], dtype=np.float64)
            ref = ort_embed(reference, ids[:1])[0]
            cosine = lambda x, y: float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))
            cos, cos_e, cos_o = cosine(ev, ort_out[0]), cosine(ev, ref), cosine(ort_out[0], ref)
            row = {"precision": prec, "batch": batch, "tokens": tokens,
                   "engine_sentences_per_s": e["sentences_per_s"], "ort_sentences_per_s": batch / ort_s,
                   "ratio": e["sentences_per_s"] / (batch / ort_s), "engine_median_ms": e["median_s"] * 1e3,
                   "ort_median_ms": ort_s * 1e3, "cosine_engine_vs_ort": cos,
                   "cosine_engine_vs_f32": cos_e, "cosine_ort_vs_f32": cos_o, "engine_ops": e["last_run"]["ops"]}
            rows.append(row)
            print(f"{prec:9s} {f'{batch} x {tokens}':>14s} {row['engine_sentences_per_s']:14.1f} "
                  f"{row['ort_sentences_per_s']:11.1f} {row['ratio']:9.2f}x {cos:10.5f} {cos_e:10.5f} {cos_o:12.5f}", flush=True)
    env["load_1min_end"] = load()
    by = {(r["precision"], r["batch"], r["tokens"]): r for r in rows}
    f32_ok = all(r["ratio"] >= 1.0 for r in rows if r["precision"] == "f32")
    int8_ok = all(by[("int8", b, t)]["engine_sentences_per_s"] > by[("f32", b, t)]["engine_sentences_per_s"]
                  for b, t in SHAPES if ("int8", b, t) in by and ("f32", b, t) in by)
    print(f"load average at end {env['load_1min_end']:.2f}")
    print(f"target engine >= 1.0x ORT at f32 in every row: {'met' if f32_ok else 'NOT met'}; "
          f"engine int8 faster than engine f32 in every row: {'met' if int8_ok else 'NOT met'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": env, "rows": rows, "f32_target_met": f32_ok, "int8_target_met": int8_ok}, f, indent=1)


if __name__ == "__main__":
    main()
