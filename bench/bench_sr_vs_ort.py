#!/usr/bin/env python3
"""EDSR x2 super-resolution: `npu upscale` (host backend) against ONNX Runtime, same threads, one run.

The network is EDSR baseline x2 (16 residual blocks, 64 features, res_scale 1) with random
weights, written by scripts/make_sr_fixtures.py --onnx-edsr-x2 as a PyTorch state dict (read by
the engine) and the same module exported to ONNX (read by ONNX Runtime). Both upscale the same
fixed 8-bit image (default 256x256 -> 512x512); the engine's time is its own upscale timing
(decode, load and PNG encode excluded), ONNX Runtime's is session.run on the f32 tensor. Each side
runs once to warm up, then `--runs` rounds alternate engine / ONNX Runtime (/ `--before`, an
older npu binary); the medians are reported with the load average.

    /work/benchvenv/bin/python bench/bench_sr_vs_ort.py --npu build/bin/npu --threads 2

(the venv needs torch, onnx and onnxruntime: bench/requirements-peers.txt, plus pillow).
"""
import argparse
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

    def run_npu(npu, out_png):
        cmd = [npu, "--threads", str(a.threads), "upscale", in_png, out_png, "--model",
               os.path.join(a.work, "edsr_x2.pt"), "--scale", "2", "--tile", str(a.size)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{npu} failed: {r.stderr}")
        return float(re.search(r" in ([0-9.]+) s", r.stderr).group(1))

    # Alternating rounds (engine, ORT, older engine): a load change on the shared machine hits
    # all sides alike instead of whichever ran last.
    out_png = os.path.join(a.work, "engine.png")
    before_png = os.path.join(a.work, "engine_before.png")
    run_npu(a.npu, out_png)  # warm-up (page cache, CPU frequency)
    if a.before:
        run_npu(a.before, before_png)
    ort_times, npu_times, before_times = [], [], []
    for _ in range(a.runs):
        npu_times.append(run_npu(a.npu, out_png))
        t, y = run_ort()
        ort_times.append(t)
        if a.before:
            before_times.append(run_npu(a.before, before_png))
    ort_rgb = np.clip(np.rint(y[0]), 0, 255).astype(np.uint8).transpose(1, 2, 0)
    agree = psnr(read_png(out_png), ort_rgb)

    t_ort, t_npu = statistics.median(ort_times), statistics.median(npu_times)
    print(f"EDSR baseline x2 (16 blocks, 64 features), {a.size}x{a.size} -> {2 * a.size}x{2 * a.size}, "
          f"{a.threads} threads, median of {a.runs}")
    print(f"  onnxruntime {ort.__version__}: {t_ort * 1000:.0f} ms  (runs: {', '.join(f'{t * 1000:.0f}' for t in ort_times)})")
    print(f"  xdna-engine host:  {t_npu * 1000:.0f} ms  (runs: {', '.join(f'{t * 1000:.0f}' for t in npu_times)})")
    print(f"  ratio (onnxruntime time / engine time): {t_ort / t_npu:.2f}x")
    if a.before:
        t_before = statistics.median(before_times)
        print(f"  before ({a.before}): {t_before * 1000:.0f} ms  (runs: {', '.join(f'{t * 1000:.0f}' for t in before_times)}), "
              f"ratio {t_ort / t_before:.2f}x; engine speed-up {t_before / t_npu:.2f}x; "
              f"PSNR before vs after {psnr(read_png(out_png), read_png(before_png)):.1f} dB")
    print(f"  load average: {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    print(f"  output agreement, 8-bit PSNR engine vs onnxruntime: {agree:.1f} dB")


if __name__ == "__main__":
    main()
