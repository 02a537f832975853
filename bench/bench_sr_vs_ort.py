#!/usr/bin/env python3
"""EDSR x2 super-resolution: the engine (host backend) against ONNX Runtime, same threads, both warm.

The network is EDSR baseline x2 (16 residual blocks, 64 features, res_scale 1) with random
weights, written by scripts/make_sr_fixtures.py --onnx-edsr-x2 as a PyTorch state dict (read by
the engine) and the same module exported to ONNX (read by ONNX Runtime). Both upscale the same
fixed 8-bit image (default 256x256 -> 512x512).

Both sides are timed warm, in-process: ONNX Runtime's session.run after a warm-up run in the same
session (its arena reused), the engine's `npu bench upscale` (model loaded once, one untimed
warm-up upscale, then a timed one; decode, load and PNG encode excluded). The engine's cold figure,
the first upscale of its process (what one `npu upscale` run times: activations touched for the
first time, the kernel zeroing fresh pages), is reported too, labelled "one-shot". `--runs` rounds
alternate engine / ONNX Runtime (/ `--before`, an older npu binary) so that a load change hits all
sides alike; the medians are reported with the load average. A `--before` binary without
`npu bench upscale` is timed the old way (one `npu upscale` process per round, cold), and the
output says so.

    /work/benchvenv/bin/python bench/bench_sr_vs_ort.py --npu build/bin/npu --threads 2

(the venv needs torch, onnx, onnxruntime and pillow: bench/requirements-peers.txt).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ensure_model(work, size):
    if all(os.path.exists(os.path.join(work, f)) for f in ("edsr_x2.pt", "edsr_x2.onnx", "input.f32")):
        return
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import make_sr_fixtures
    make_sr_fixtures.export_edsr_x2(work, size)


def write_png(path, rgb):
    from PIL import Image
    Image.fromarray(rgb).save(path)


def read_png(path):
    from PIL import Image
    return np.asarray(Image.open(path).convert("RGB"))


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--npu", default=os.path.join(ROOT, "build", "bin", "npu"))
    ap.add_argument("--work", default="/tmp/xdna-bench-sr")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3,
                    help="rounds; each runs the engine, ONNX Runtime (and --before) once, alternating")
    ap.add_argument("--before", help="a second npu binary (an older build) timed in the same rounds")
    a = ap.parse_args()
    load_start = os.getloadavg()[0]

    ensure_model(a.work, a.size)
    x = np.fromfile(os.path.join(a.work, "input.f32"), dtype="<f4").reshape(3, a.size, a.size)
    rgb = np.clip(np.rint(x), 0, 255).astype(np.uint8).transpose(1, 2, 0).copy()  # the fixed image
    in_png = os.path.join(a.work, "input.png")
    write_png(in_png, rgb)
    feed = rgb.transpose(2, 0, 1)[None].astype(np.float32)

    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(os.path.join(a.work, "edsr_x2.onnx"), so, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": feed})[0]  # warm-up

    def run_ort():
        t0 = time.perf_counter()
        out = sess.run(None, {"x": feed})[0]
        return time.perf_counter() - t0, out

    model_pt = os.path.join(a.work, "edsr_x2.pt")

    def has_bench_upscale(npu):
        # `bench --help` lists the subcommands (an older binary may accept `bench upscale --help`
        # without having it: CLI11 can print help before it rejects the unknown word).
        r = subprocess.run([npu, "bench", "--help"], capture_output=True, text=True)
        return re.search(r"^\s+upscale\b", r.stdout, re.M) is not None

    def run_npu_cold(npu, out_png):
        """One `npu upscale` process: its own timing of the first (cold) upscale."""
        cmd = [npu, "--threads", str(a.threads), "upscale", in_png, out_png, "--model", model_pt,
               "--scale", "2", "--tile", str(a.size)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{npu} failed: {r.stderr}")
        return {"warm": None, "cold": float(re.search(r" in ([0-9.]+) s", r.stderr).group(1))}

    def run_npu_warm(npu, out_png):
        """One `npu bench upscale` process: a cold upscale (untimed warm-up, reported) then a warm one."""
        cmd = [npu, "--threads", str(a.threads), "bench", "upscale", "--model", model_pt, "--image", in_png,
               "--scale", "2", "--tile", str(a.size), "--warmup", "1", "--runs", "1", "--out", out_png, "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{npu} failed: {r.stderr}")
        j = json.loads(r.stdout)
        return {"warm": j["median_s"], "cold": j["first_s"]}

    # Alternating rounds (engine, ORT, older engine): a load change on the shared machine hits
    # all sides alike instead of whichever ran last.
    out_png = os.path.join(a.work, "engine.png")
    before_png = os.path.join(a.work, "engine_before.png")
    if not has_bench_upscale(a.npu):
        sys.exit(f"{a.npu} has no `bench upscale` subcommand: build a newer npu")
    run_before = None
    if a.before:
        run_before = run_npu_warm if has_bench_upscale(a.before) else run_npu_cold
    run_npu_cold(a.npu, out_png)  # warm-up (page cache, CPU frequency)
    ort_times, npu_runs, before_runs = [], [], []
    for _ in range(a.runs):
        npu_runs.append(run_npu_warm(a.npu, out_png))
        t, y = run_ort()
        ort_times.append(t)
        if a.before:
            before_runs.append(run_before(a.before, before_png))
    ort_rgb = np.clip(np.rint(y[0]), 0, 255).astype(np.uint8).transpose(1, 2, 0)
    agree = psnr(read_png(out_png), ort_rgb)

    def ms(ts):
        return ", ".join(f"{t * 1000:.0f}" for t in ts)

    t_ort = statistics.median(ort_times)
    warm = [r["warm"] for r in npu_runs]
    cold = [r["cold"] for r in npu_runs]
    t_npu, t_cold = statistics.median(warm), statistics.median(cold)
    print(f"EDSR baseline x2 (16 blocks, 64 features), {a.size}x{a.size} -> {2 * a.size}x{2 * a.size}, "
          f"{a.threads} threads, median of {a.runs}")
    print(f"  onnxruntime {ort.__version__} (warm, session.run after a warm-up): {t_ort * 1000:.0f} ms  (runs: {ms(ort_times)})")
    print(f"  xdna-engine host (warm, `npu bench upscale`): {t_npu * 1000:.0f} ms  (runs: {ms(warm)})")
    print(f"  ratio (onnxruntime time / engine time), both warm: {t_ort / t_npu:.2f}x")
    print(f"  engine one-shot (cold: first upscale of the process, as one `npu upscale` run times it): "
          f"{t_cold * 1000:.0f} ms  (runs: {ms(cold)}), ratio {t_ort / t_cold:.2f}x (not like for like)")
    if a.before:
        b_cold = statistics.median([r["cold"] for r in before_runs])
        b_psnr = psnr(read_png(out_png), read_png(before_png))
        if run_before is run_npu_warm:
            b_warm = statistics.median([r["warm"] for r in before_runs])
            print(f"  before ({a.before}), warm: {b_warm * 1000:.0f} ms  (runs: {ms([r['warm'] for r in before_runs])}), "
                  f"ratio {t_ort / b_warm:.2f}x; engine speed-up (warm) {b_warm / t_npu:.2f}x; "
                  f"one-shot {b_cold * 1000:.0f} ms; PSNR before vs after {b_psnr:.1f} dB")
        else:
            print(f"  before ({a.before}) has no `npu bench upscale`: timed one-shot (cold) only: "
                  f"{b_cold * 1000:.0f} ms  (runs: {ms([r['cold'] for r in before_runs])}); "
                  f"engine one-shot speed-up {b_cold / t_cold:.2f}x; PSNR before vs after {b_psnr:.1f} dB")
    print(f"  load average: {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    print(f"  output agreement, 8-bit PSNR engine vs onnxruntime: {agree:.1f} dB")


if __name__ == "__main__":
    main()
