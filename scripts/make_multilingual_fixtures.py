#!/usr/bin/env python3
"""Multilingual clips and faster-whisper references for tests/pipeline/test_transcribe_multilingual.cpp.

Speaks the committed sentences below with espeak-ng (German, French, Spanish, Italian), encodes
each as 16 kHz mono Opus (16 kb/s, a few KB) with the ffmpeg CLI into
tests/fixtures/transcribe/multilingual/<lang>.opus, then runs faster-whisper (PyPI
faster-whisper==1.2.1) with the multilingual Whisper base (CTranslate2) on each clip, decoded to
16 kHz mono f32 by the ffmpeg CLI: language detection (code + probability), transcription with
the language detected, and translation (task="translate"), beam 5, default temperature ladder,
no VAD. One run per compute type (int8 = the store's default precision, float32), written to
tests/fixtures/transcribe/multilingual/whisper-base.json keyed by precision.

Usage (in a venv with faster-whisper; /work/benchvenv here):
  python scripts/make_multilingual_fixtures.py --model-dir /path/to/ctranslate2/whisper-base
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np
from faster_whisper import WhisperModel

OUT_DIR = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "transcribe", "multilingual")

# (language code, espeak-ng voice, sentence)
CLIPS = [
    ("de", "de", "Heute scheint die Sonne und wir gehen im Park spazieren. "
                 "Am Abend kochen wir zusammen eine Suppe."),
    ("fr", "fr-fr", "Le train pour Paris part à huit heures du matin. "
                    "Nous avons réservé deux places près de la fenêtre."),
    ("es", "es", "Mi hermana vive en una casa pequeña cerca del mar. "
                 "Los domingos comemos pescado con toda la familia."),
    ("it", "it", "La biblioteca della città apre alle nove. "
                 "Ogni mattina molti studenti vengono a leggere i giornali."),
]


def make_clip(voice, text, path):
    with tempfile.NamedTemporaryFile(suffix=".wav") as wav:
        subprocess.run(["espeak-ng", "-v", voice, "-s", "130", "-w", wav.name, text], check=True)
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", wav.name, "-ac", "1",
                        "-ar", "16000", "-c:a", "libopus", "-b:a", "16k", "-map_metadata", "-1",
                        "-fflags", "+bitexact", path], check=True)


def decode(path):
    raw = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", path, "-f", "f32le",
                          "-ac", "1", "-ar", "16000", "-"], check=True, capture_output=True).stdout
    return np.frombuffer(raw, dtype="<f4").copy()


def run(model, audio, task):
    segments, info = model.transcribe(audio, task=task, beam_size=5, best_of=5, vad_filter=False,
                                      condition_on_previous_text=True, word_timestamps=False)
    text = "".join(s.text for s in segments).strip()
    return text, info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(OUT_DIR, exist_ok=True)
    for lang, voice, text in CLIPS:
        make_clip(voice, text, os.path.join(OUT_DIR, lang + ".opus"))

    out = {"generator": "faster-whisper 1.2.1, beam 5, no VAD, default temperature ladder",
           "sentences": {lang: text for lang, _, text in CLIPS}, "precisions": {}}
    for precision, compute_type in [("int8", "int8"), ("f32", "float32")]:
        model = WhisperModel(args.model_dir, device="cpu", compute_type=compute_type,
                             cpu_threads=args.threads)
        clips = {}
        for lang, _, _ in CLIPS:
            audio = decode(os.path.join(OUT_DIR, lang + ".opus"))
            text, info = run(model, audio, "transcribe")
            translation, _ = run(model, audio, "translate")
            clips[lang] = dict(language=info.language,
                               language_probability=round(info.language_probability, 4),
                               duration=round(info.duration, 3), text=text, translation=translation)
            print(precision, lang, clips[lang])
        out["precisions"][precision] = clips
    with open(os.path.join(OUT_DIR, "whisper-base.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
