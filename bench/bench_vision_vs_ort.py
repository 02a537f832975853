#!/usr/bin/env python3
"""Vision classifiers, engine vs ONNX Runtime: ResNet-50 and ViT-B/16 forward pass, one 224x224 image.

Randomly initialised models of the real architectures (transformers ResNetForImageClassification
with microsoft/resnet-50's config, ViTForImageClassification with google/vit-base-patch16-224's;
the configs are written below, nothing is downloaded) are saved as safetensors + config.json under
--work-dir (never in the repo) and exported with torch.onnx.export. Both runtimes get the same
preprocessed pixels [1, 3, 224, 224] f32 (a fixed formula, so no image decode is timed), the same
thread count, and are timed in one run, rows alternating engine / ORT. The engine side is
bench/bench_vision.cpp (build target bench_vision), which times only the forward pass.

  /work/benchvenv/bin/python bench/bench_vision_vs_ort.py --bench build/bin/bench_vision
      [--rounds 5] [--before OLD/bench_vision] [--wait-idle 0.9]

Random weights change nothing about the speed of a dense forward pass. The correctness column is
the largest |engine - ORT| logit over the largest |ORT| logit, and whether the top-1 class agrees.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embeddings_vs_onnxruntime import lscpu_model, ort_session  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SIZE = 224

# name -> (transformers model class, config class, config kwargs as the hub's config.json has them)
MODELS = {
    "resnet-50": ("ResNetForImageClassification", "ResNetConfig", dict(
        num_channels=3, embedding_size=64, hidden_sizes=[256, 512, 1024, 2048], depths=[3, 4, 6, 3],
        layer_type="bottleneck", hidden_act="relu", downsample_in_first_stage=False,
        num_labels=1000)),
    "vit-b-16": ("ViTForImageClassification", "ViTConfig", dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        initializer_range=0.02, layer_norm_eps=1e-12, image_size=224, patch_size=16,
        num_channels=3, qkv_bias=True, num_labels=1000)),
}


def pixels():
    """A smooth pattern with edges, in the range normalised ImageNet pixels have (about -2..2)."""
    c, y, x = np.meshgrid(np.arange(3), np.arange(SIZE), np.arange(SIZE), indexing="ij")
    v = np.sin(0.07 * x + 0.9 * c) * np.cos(0.05 * y - 0.4 * c) * 1.6 + ((x // 28 + y // 28) % 2) * 0.5 - 0.25
    return v.astype(np.float32)[None]


def build(name, d):
    """Random-init model -> d/hf (safetensors + config.json) and d/model.onnx (cached)."""
    import torch
    import transformers
    hf, onnx_path = os.path.join(d, "hf"), os.path.join(d, "model.onnx")
    if os.path.exists(os.path.join(hf, "config.json")) and os.path.exists(onnx_path):
        return hf, onnx_path
    cls_name, cfg_name, kwargs = MODELS[name]
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(getattr(transformers, cfg_name)(**kwargs)).eval()
    if name == "resnet-50":  # non-trivial BatchNorm statistics, so folding them is exercised
        g = torch.Generator().manual_seed(1)
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
    model.save_pretrained(hf, safe_serialization=True)
    print(f"{name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {hf}", file=sys.stderr)
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(pixels()),), onnx_path, dynamo=True,
                          input_names=["pixel_values"], output_names=["logits"], external_data=False)
    return hf, onnx_path


def time_ort(sess, x, iters, warmup):
    for _ in range(warmup):
        out = sess.run(None, {"pixel_values": x})[0]
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = sess.run(None, {"pixel_values": x})[0]
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def wait_idle(fraction, limit_s=120.0):
    """Waits until the CPUs were at least `fraction` idle over 0.5 s (another job on the shared
    machine has paused); gives up after limit_s. Returns whether the machine was idle."""
    def ticks():
        v = [int(f) for f in open("/proc/stat").readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, all
    end = time.monotonic() + limit_s
    while True:
        i0, t0 = ticks()
        time.sleep(0.5)
        i1, t1 = ticks()
        if (i1 - i0) >= fraction * max(t1 - t0, 1):
            return True
        if time.monotonic() > end:
            return False


def time_engine(bench, hf, pixels_path, logits_path, iters, warmup, threads):
    r = subprocess.run([bench, f"--model={hf}", f"--pixels={pixels_path}", f"--logits={logits_path}",
                        f"--iters={iters}", f"--warmup={warmup}", f"--threads={threads}", f"--size={SIZE}"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench_vision failed on {hf}:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "bench_vision"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--work-dir", default="/tmp/xdna-bench-vision")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate engine / ORT (/ --before) this many times; medians of the round medians")
    ap.add_argument("--before", help="an older bench_vision binary timed in the same rounds")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="FRACTION",
                    help="before each timing, wait (up to 120 s) until the CPUs are this idle, e.g. 0.9: "
                         "on a shared machine, rounds then fall in the gaps between other jobs")
    a = ap.parse_args()
    if not 0.0 <= a.wait_idle <= 1.0:
        sys.exit(f"--wait-idle is a fraction of idle CPU time in [0, 1] (0 = off), got {a.wait_idle}")

    import onnxruntime as ort
    env = {"cpu": lscpu_model(), "threads": a.threads, "onnxruntime": ort.__version__,
           "load_1min_start": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"CPU {env['cpu']}; {a.threads} threads each; onnxruntime {ort.__version__}; median of {a.iters} calls "
          f"after {a.warmup} warm-up; 1 x 3 x {SIZE} x {SIZE} f32; load average {env['load_1min_start']:.2f}",
          flush=True)
    print(f"{'model':10s} {'engine ms':>10s} {'ORT ms':>9s} {'ORT/engine':>10s} {'max|diff|/max|ORT|':>19s} "
          f"{'top-1':>6s} {'load':>5s}", flush=True)
    x = pixels()
    os.makedirs(a.work_dir, exist_ok=True)
    pixels_path = os.path.join(a.work_dir, "pixels.f32")
    x.tofile(pixels_path)
    rows = []
    for name in a.models.split(","):
        d = os.path.join(a.work_dir, name)
        hf, onnx_path = build(name, d)
        logits_path = os.path.join(d, "engine_logits.f32")
        sess = ort_session(onnx_path, a.threads)
        # Alternating rounds: a load change on the shared machine hits every side alike.
        eng, orts, befores = [], [], []
        idle = [True]  # every wait found the machine idle
        gate = (lambda: idle.append(wait_idle(a.wait_idle))) if a.wait_idle > 0 else (lambda: None)
        for _ in range(a.rounds):
            gate()
            eng.append(time_engine(a.bench, hf, pixels_path, logits_path, a.iters, a.warmup, a.threads)["median_s"])
            gate()
            ort_s, ref = time_ort(sess, x, a.iters, a.warmup)
            orts.append(ort_s)
            if a.before:
                gate()
                befores.append(time_engine(a.before, hf, pixels_path, logits_path + ".before", a.iters, a.warmup,
                                           a.threads)["median_s"])
        e = {"median_s": statistics.median(eng)}
        ort_s = statistics.median(orts)
        del sess
        got = np.fromfile(logits_path, dtype=np.float32).reshape(ref.shape)
        rel = float(np.abs(got - ref).max() / np.abs(ref).max())
        top1 = bool(got.argmax() == ref.argmax())
        row = {"model": name, "engine_median_ms": e["median_s"] * 1e3, "ort_median_ms": ort_s * 1e3,
               "speedup_vs_ort": ort_s / e["median_s"], "max_rel_diff": rel, "top1_agrees": top1,
               "load_1min": os.getloadavg()[0], "engine_rounds_ms": [t * 1e3 for t in eng],
               "ort_rounds_ms": [t * 1e3 for t in orts], "all_waits_idle": all(idle)}
        if a.before:
            row["before_median_ms"] = statistics.median(befores) * 1e3
            row["before_rounds_ms"] = [t * 1e3 for t in befores]
        rows.append(row)
        print(f"{name:10s} {row['engine_median_ms']:10.1f} {row['ort_median_ms']:9.1f} "
              f"{row['speedup_vs_ort']:9.2f}x {rel:19.2e} {'same' if top1 else 'DIFF':>6s} {row['load_1min']:5.1f}",
              flush=True)
        if not all(idle):
            print(f"  ({idle.count(False)} of {len(idle) - 1} waits for an idle machine timed out)", flush=True)
        if a.before:
            print(f"{'  before':10s} {row['before_median_ms']:10.1f} {'':9s} {ort_s * 1e3 / row['before_median_ms']:9.2f}x"
                  f"   engine speed-up {row['before_median_ms'] / row['engine_median_ms']:.2f}x", flush=True)
    env["load_1min_end"] = os.getloadavg()[0]
    ok = all(r["max_rel_diff"] < 1e-4 and r["top1_agrees"] for r in rows)
    print(f"correctness: engine logits {'match' if ok else 'DO NOT match'} ORT's (bound 1e-4 of max |logit|, same top-1); "
          f"load average at end {env['load_1min_end']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": env, "rows": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
