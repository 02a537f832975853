#!/usr/bin/env python3
"""Conformer ASR speed: this engine against onnx-asr 0.12.0 (onnxruntime) on the same randomly
initialised full-size models, same audio, same thread count, one run (issue 10).

Models (scripts/export_conformer_bench_models.py writes each twice from one set of weights):
  parakeet-ctc  parakeet-ctc-0.6b's architecture, 80 mels, 1024 pieces + blank
  parakeet-tdt  parakeet-tdt-0.6b-v2's architecture, 128 mels, TDT head (durations 0..4)
  gigaam-ctc    GigaAM v2 CTC's architecture, 64 mels, 33 letters + blank
This engine reads <root>/<model>/engine (a transformers directory or gigaam's .ckpt); onnx-asr
reads <root>/<model>/onnx as a local model of type nemo-conformer-ctc / nemo-conformer-tdt /
gigaam-v2-ctc, with its own log-mel frontends (NumPy on CPU, its default).

Audio: the repo's test clips (tests/fixtures/audio/librivox_0870.mp3, speech16k.wav) decoded to
16 kHz and concatenated until --seconds (default 60) are reached; the warm-up clip is its first
--warm-seconds (default 10).

Method: each side in its own process. onnx-asr: one InferenceSession per model file with
intra_op_num_threads = --threads (inter-op 1, sequential), OMP/OpenBLAS threads = --threads for
its NumPy frontend; load, recognise the warm-up clip once, then one timed recognition of the long
clip. This engine is a CLI process, so it runs twice: `npu --threads N transcribe WARM --model
DIR` and the same with WARM LONG; the difference of the two wall times is the long clip without
model loading or warm-up (the model's files are read once before, so that both runs load
them from the page cache). RTF = seconds / audio seconds; ratio = onnx-asr seconds / engine
seconds (>= 1.0: the engine is faster; issue 10's target).

Text agreement: with random weights both emit nonsense, but greedy CTC over the same log-probs
gives the same tokens, so the texts are compared (word-level match ratio and the first
difference) for the warm-up clip (one encoder pass on both sides) and the long clip (this engine
encodes audio up to 60 s in one pass, as onnx-asr does; longer audio in overlapping chunks, where
frames near a chunk border see different context, so some difference there is expected).

Usage (peers venv):
  /work/benchvenv/bin/python bench/conformer_vs_onnx_asr.py --npu build/bin/npu --threads 2 \
      [--models parakeet-ctc parakeet-tdt gigaam-ctc] [--json out.json] [--engine-args ...]
"""
import argparse
import difflib
import json
import os
import resource
import subprocess
import sys
import time
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ROOT = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                    "xdna-engine", "bench", "conformer")
ONNX_ASR_TYPE = {"parakeet-ctc": "nemo-conformer-ctc", "parakeet-tdt": "nemo-conformer-tdt",
                 "gigaam-ctc": "gigaam-v2-ctc"}
CLIPS = ["librivox_0870.mp3", "speech16k.wav"]


# ----------------------------------------------------------------------------- audio

def decode16k(path):
    """Any audio file -> 16 kHz mono float32 through ffmpeg."""
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "s16le", "-ac", "1", "-ar", "16000", "-"],
                         check=True, capture_output=True).stdout
    return np.frombuffer(raw, np.int16).astype(np.float32) / 32768.0


def write_wav(path, samples):
    pcm = np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())


def read_wav(path):
    with wave.open(path) as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


def make_audio(out_dir, seconds, warm_seconds):
    """(warm-up wav, long wav): the test clips repeated to `seconds`, and its first `warm_seconds`."""
    os.makedirs(out_dir, exist_ok=True)
    clips = [decode16k(os.path.join(REPO, "tests", "fixtures", "audio", c)) for c in CLIPS]
    parts, n, i = [], 0, 0
    while n < seconds * 16000:
        parts.append(clips[i % len(clips)])
        n += len(parts[-1])
        i += 1
    long = np.concatenate(parts)[: int(seconds * 16000)]
    long_path = os.path.join(out_dir, f"long_{seconds:g}s.wav")
    warm_path = os.path.join(out_dir, f"warm_{warm_seconds:g}s.wav")
    write_wav(long_path, long)
    write_wav(warm_path, long[: int(warm_seconds * 16000)])
    return warm_path, long_path


# ----------------------------------------------------------------------------- onnx-asr (child)

def child_main(args):
    import onnxruntime as rt
    import onnx_asr
    opts = rt.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = rt.ExecutionMode.ORT_SEQUENTIAL
    t0 = time.perf_counter()
    model = onnx_asr.load_model(ONNX_ASR_TYPE[args.child.removesuffix("-tiny")], args.child_dir, sess_options=opts,
                                providers=["CPUExecutionProvider"])
    load_s = time.perf_counter() - t0
    warm, long = read_wav(args.child_audio[0]), read_wav(args.child_audio[1])
    warm_text = model.recognize(warm)
    t0, c0 = time.perf_counter(), time.process_time()
    long_text = model.recognize(long)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"load_s": load_s, "seconds": seconds, "cpu_s": cpu, "warm_text": warm_text, "text": long_text,
                      "versions": {"onnx_asr": getattr(onnx_asr, "__version__", "?"),
                                   "onnxruntime": rt.__version__}}))


def thread_env(threads):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "XDNA_THREADS"):
        env[k] = str(threads)
    return env


def run_onnx_asr(model, audio, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, "--child-dir",
           os.path.join(args.root, model, "onnx"), "--threads", str(args.threads), "--child-audio", *audio]
    out = subprocess.run(cmd, capture_output=True, text=True, env=thread_env(args.threads))
    if out.returncode != 0:
        raise RuntimeError(f"onnx-asr {model} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- this engine

def parse_json_objects(text):
    decoder, objects, pos = json.JSONDecoder(), [], 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            return objects
        obj, pos = decoder.raw_decode(text, start)
        objects.append(obj)


def engine_model_path(model, root):
    d = os.path.join(root, model, "engine")
    ckpts = [f for f in os.listdir(d) if f.endswith(".ckpt")]
    return os.path.join(d, ckpts[0]) if ckpts else d


def run_engine(model, audio, args):
    path = engine_model_path(model, args.root)

    def timed(files):
        cmd = [args.npu, "--threads", str(args.threads), "transcribe", *files, "--model", path,
               "--format", "json"] + args.engine_args
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(cmd, capture_output=True, text=True, env=thread_env(args.threads))
        wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
        if out.returncode != 0:
            why = (out.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"npu transcribe failed ({out.returncode}): {why}")
        objs = parse_json_objects(out.stdout)
        if len(objs) != len(files):
            raise RuntimeError(f"npu transcribe printed {len(objs)} JSON objects for {len(files)} files")
        return wall, cpu, objs

    # Both runs must load the model from the page cache: a cold first load (the file evicted by
    # the other models) would make the difference, and so the engine's time, too small.
    files = [os.path.join(path, f) for f in os.listdir(path)] if os.path.isdir(path) else [path]
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    warm_wall, warm_cpu, _ = timed([audio[0]])
    all_wall, all_cpu, objs = timed(list(audio))
    return {"seconds": max(all_wall - warm_wall, 1e-9), "cpu_s": all_cpu - warm_cpu,
            "wall_with_load_s": all_wall, "warm_only_s": warm_wall,
            "warm_text": objs[0].get("text", ""), "text": objs[1].get("text", ""),
            "fields": {k: v for k, v in objs[1].items() if k.endswith("_ms")}}


# ----------------------------------------------------------------------------- report

def agreement(a, b):
    """(identical, word match ratio, first differing word index or None)."""
    wa, wb = a.split(), b.split()
    first = next((i for i, (x, y) in enumerate(zip(wa, wb)) if x != y), None)
    if first is None and len(wa) != len(wb):
        first = min(len(wa), len(wb))
    return wa == wb, difflib.SequenceMatcher(None, wa, wb, autojunk=False).ratio(), first, len(wa), len(wb)


def describe(label, a, b):
    same, ratio, first, na, nb = agreement(a, b)
    if same:
        return f"{label}: identical ({na} words)"
    return (f"{label}: differ: word match {ratio:.3f} ({na} vs {nb} words), first difference at word {first}: "
            f"engine {' '.join(a.split()[first:first + 4])!r} vs onnx-asr {' '.join(b.split()[first:first + 4])!r}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--npu", default=os.path.join(REPO, "build", "bin", "npu"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--models", nargs="+", default=["parakeet-ctc", "parakeet-tdt", "gigaam-ctc"],
                   help="parakeet-ctc, parakeet-tdt, gigaam-ctc (a -tiny suffix: the exporter's --tiny models)")
    p.add_argument("--root", default=ROOT, help="where export_conformer_bench_models.py wrote the models")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--warm-seconds", type=float, default=10.0)
    p.add_argument("--json")
    p.add_argument("--engine-args", nargs=argparse.REMAINDER, default=[],
                   help="more options for `npu transcribe` (last on the line)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-dir", help=argparse.SUPPRESS)
    p.add_argument("--child-audio", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child_main(args)
    for m in args.models:
        if m.removesuffix("-tiny") not in ONNX_ASR_TYPE:
            p.error(f"--models: unknown model {m!r} (known: {', '.join(sorted(ONNX_ASR_TYPE))})")

    audio = make_audio(os.path.join(args.root, "audio"), args.seconds, args.warm_seconds)
    seconds = len(read_wav(audio[1])) / 16000
    print(f"audio: {seconds:.1f} s (warm-up {args.warm_seconds:g} s), threads {args.threads}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    results = {}
    for model in args.models:
        r = {}
        for side, fn in (("onnx-asr", run_onnx_asr), ("engine", run_engine)):
            print(f"  {model}: {side} ...", file=sys.stderr, flush=True)
            try:
                r[side] = fn(model, audio, args)
            except (RuntimeError, OSError, json.JSONDecodeError) as e:
                r[side] = {"error": str(e).strip().splitlines()[-1]}
        results[model] = r
        if args.json:
            with open(args.json + ".partial", "w") as f:
                json.dump(results, f, ensure_ascii=False, indent=1)

    print(f"\n{'model':14s} {'engine s':>9s} {'RTF':>7s} {'onnx-asr s':>10s} {'RTF':>7s} {'ratio':>6s}"
          f" {'engine cpu s':>12s} {'onnx-asr cpu s':>14s} {'cpu ratio':>9s}")
    for model, r in results.items():
        e, o = r["engine"], r["onnx-asr"]
        es = e.get("seconds")
        os_ = o.get("seconds")
        cells = [f"{es:9.2f} {es / seconds:7.3f}" if es else f"{'-':>9s} {'-':>7s}",
                 f"{os_:10.2f} {os_ / seconds:7.3f}" if os_ else f"{'-':>10s} {'-':>7s}",
                 f"{os_ / es:6.2f}" if es and os_ else f"{'-':>6s}"]
        ec, oc = e.get("cpu_s"), o.get("cpu_s")
        cells += [f"{ec:12.2f}" if ec else f"{'-':>12s}", f"{oc:14.2f}" if oc else f"{'-':>14s}",
                  f"{oc / ec:9.2f}" if ec and oc else f"{'-':>9s}"]
        print(f"{model:14s} " + " ".join(cells))
        for side in ("engine", "onnx-asr"):
            if "error" in r[side]:
                print(f"    {side}: not run: {r[side]['error']}")
        if "text" in e and "text" in o:
            print("    " + describe(f"warm-up clip ({args.warm_seconds:g} s)", e["warm_text"], o["warm_text"]))
            print("    " + describe(f"long clip ({seconds:.0f} s)", e["text"], o["text"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"audio_seconds": seconds, "threads": args.threads, "results": results}, f,
                      ensure_ascii=False, indent=1)


if __name__ == "__main__":
    sys.exit(main())
