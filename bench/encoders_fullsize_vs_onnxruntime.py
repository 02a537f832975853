#!/usr/bin/env python3
"""Speed of the encoder families without reachable real weights, on full-size configs.

ModernBERT-base, ESM-2 35M / 150M and (multilingual-)E5-small: randomly initialised models of the
real architectures (transformers), saved as safetensors + config.json under --work-dir (never in
the repo), timed side by side with ONNX Runtime exactly as bench/embeddings_vs_onnxruntime.py
times MiniLM (same token ids, same thread count, rows alternating engine / ORT, f32 and int8).

  /work/benchvenv/bin/python bench/encoders_fullsize_vs_onnxruntime.py --npu build/bin/npu

Random weights change nothing about the speed of a dense forward pass; the cosine columns are a
sanity check that both runtimes ran the same model. The tokenizer files are the tiny fixtures'
(tests/fixtures/encoders/tiny-*): `npu bench embed` only takes the [CLS]/[SEP] frame from them, the
body ids span the config's vocabulary. Pooling is mean on both sides (ModernBERT's config says
classifier_pooling "mean" for that reason).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embeddings_vs_onnxruntime import (lscpu_model, make_ids, ort_embed, ort_session, quantize_int8,  # noqa: E402
                                       time_engine, time_ort)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "encoders")

# name -> (transformers config class, config kwargs, tiny fixture whose tokenizer files are copied)
MODELS = {
    "modernbert-base": ("ModernBertConfig", dict(
        vocab_size=50368, hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
        intermediate_size=1152, global_attn_every_n_layers=3, local_attention=128,
        max_position_embeddings=8192, hidden_activation="gelu", classifier_pooling="mean",
        pad_token_id=50283, bos_token_id=50281, eos_token_id=50282, cls_token_id=50281,
        sep_token_id=50282), "tiny-modernbert"),
    "esm2-35m": ("EsmConfig", dict(
        vocab_size=33, hidden_size=480, num_hidden_layers=12, num_attention_heads=20,
        intermediate_size=1920, max_position_embeddings=1026, position_embedding_type="rotary",
        token_dropout=True, mask_token_id=32, pad_token_id=1, emb_layer_norm_before=False,
        layer_norm_eps=1e-5, hidden_act="gelu"), "tiny-esm2"),
    "esm2-150m": ("EsmConfig", dict(
        vocab_size=33, hidden_size=640, num_hidden_layers=30, num_attention_heads=20,
        intermediate_size=2560, max_position_embeddings=1026, position_embedding_type="rotary",
        token_dropout=True, mask_token_id=32, pad_token_id=1, emb_layer_norm_before=False,
        layer_norm_eps=1e-5, hidden_act="gelu"), "tiny-esm2"),
    "multilingual-e5-small": ("BertConfig", dict(
        vocab_size=250037, hidden_size=384, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2,
        hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0), "tiny-bert-e5"),
}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.txt"]


def build_model(name, out_dir):
    """Random-init full-size model of the family -> out_dir (safetensors, config.json, tokenizer)."""
    import torch
    import transformers
    cls_name, kwargs, fixture = MODELS[name]
    torch.manual_seed(0)
    config = getattr(transformers, cls_name)(**kwargs)
    model = transformers.AutoModel.from_config(config).eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    for f in TOKENIZER_FILES:
        src = os.path.join(FIXTURES, fixture, f)
        if os.path.exists(src):
            shutil.copy(src, out_dir)
    print(f"{name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {out_dir}",
          file=sys.stderr)


def export_onnx(model_dir, out_path, with_types):
    """torch.onnx.export (dynamo) of the checkpoint's base model, batch and sequence dynamic."""
    import torch
    from transformers import AutoModel
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    batch, seq = torch.export.Dim("batch", max=1024), torch.export.Dim("seq", max=512)
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else [])
    args = tuple(torch.ones((2, 16), dtype=torch.int64) if n != "token_type_ids"
                 else torch.zeros((2, 16), dtype=torch.int64) for n in names)
    args = (args[0] * 5,) + args[1:]  # ids away from pad, so no padding path is traced
    with torch.no_grad():
        torch.onnx.export(model, args, out_path, dynamo=True, input_names=names,
                          output_names=["last_hidden_state"],
                          dynamic_shapes={n: {0: batch, 1: seq} for n in names}, external_data=False)


def prepare(name, npu, work_dir):
    """Checkpoint dir, f32 / int8 ONNX files and the engine's int8 bake for one model (cached)."""
    d = os.path.join(work_dir, name)
    ckpt, f32_onnx = os.path.join(d, "hf"), os.path.join(d, "f32.onnx")
    int8_onnx, int8_baked = os.path.join(d, "int8.onnx"), os.path.join(d, "int8.xdna")
    if not os.path.exists(os.path.join(ckpt, "config.json")):
        build_model(name, ckpt)
    if not os.path.exists(f32_onnx):
        print(f"exporting {name} -> {f32_onnx}", file=sys.stderr)
        export_onnx(ckpt, f32_onnx, with_types=MODELS[name][0] == "BertConfig")
    if not os.path.exists(int8_onnx):
        quantize_int8(f32_onnx, int8_onnx)
    if not os.path.exists(int8_baked):
        r = subprocess.run([npu, "checkpoint", "bake", ckpt, "-o", int8_baked, "--precision", "int8"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"npu checkpoint bake {ckpt} failed:\n{r.stderr}")
    return ckpt, {"f32": (ckpt, f32_onnx), "int8": (int8_baked, int8_onnx)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--npu", default=os.path.join(ROOT, "build", "bin", "npu"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--shapes", default="1x128,8x512", help="batch x tokens, comma-separated")
    ap.add_argument("--work-dir", default="/tmp/xdna-bench-encoders-fullsize")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10, help="timed calls per batch-1 row")
    ap.add_argument("--iters-batched", type=int, default=3, help="timed calls per batched row")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls (batched rows: 1)")
    ap.add_argument("--precisions", default="f32,int8")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()

    import onnxruntime as ort
    from transformers import AutoTokenizer
    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    cosine = lambda x, y: float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))  # noqa: E731
    env = {"cpu": lscpu_model(), "threads": a.threads, "onnxruntime": ort.__version__,
           "load_1min_start": os.getloadavg()[0]}
    print(f"CPU {env['cpu']}; {a.threads} threads each; onnxruntime {ort.__version__}; median of {a.iters} "
          f"(batch 1) / {a.iters_batched} (batched) calls; load average {env['load_1min_start']:.2f}", flush=True)
    print(f"{'model':22s} {'prec':4s} {'batch x tokens':>14s} {'engine ms':>10s} {'ORT ms':>9s} "
          f"{'engine/ORT':>10s} {'cos(e,ORT)':>10s} {'load':>5s}", flush=True)
    rows = []
    os.makedirs(a.work_dir, exist_ok=True)
    for name in a.models.split(","):
        ckpt, models = prepare(name, a.npu, a.work_dir)
        vocab = MODELS[name][1]["vocab_size"]
        frame = AutoTokenizer.from_pretrained(ckpt)("")["input_ids"]
        for prec in a.precisions.split(","):
            engine_model, onnx_path = models[prec]
            sess = ort_session(onnx_path, a.threads)
            for batch, tokens in shapes:
                ids = make_ids(batch, tokens, vocab, frame[0], frame[-1])
                iters, warmup = (a.iters, a.warmup) if batch == 1 else (a.iters_batched, min(1, a.warmup))
                e = time_engine(a.npu, engine_model, batch, tokens, iters, warmup, a.threads)
                if e["input_ids_0"] != ids[0].tolist():
                    sys.exit(f"{name}: engine and ORT inputs differ: check body_id and the frame")
                ort_s, ort_out = time_ort(sess, ids, iters, warmup)
                cos = cosine(np.asarray(e["embedding_0"], dtype=np.float64), ort_out[0])
                row = {"model": name, "precision": prec, "batch": batch, "tokens": tokens,
                       "engine_median_ms": e["median_s"] * 1e3, "ort_median_ms": ort_s * 1e3,
                       "ratio": e["sentences_per_s"] / (batch / ort_s), "cosine_engine_vs_ort": cos,
                       "load_1min": os.getloadavg()[0], "engine_ops": e["last_run"]["ops"]}
                rows.append(row)
                print(f"{name:22s} {prec:4s} {f'{batch} x {tokens}':>14s} {row['engine_median_ms']:10.1f} "
                      f"{row['ort_median_ms']:9.1f} {row['ratio']:9.2f}x {cos:10.5f} {row['load_1min']:5.1f}",
                      flush=True)
            del sess
    env["load_1min_end"] = os.getloadavg()[0]
    print(f"load average at end {env['load_1min_end']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
