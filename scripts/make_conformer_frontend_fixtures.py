#!/usr/bin/env python3
"""Reference log-mel features for tests/pipeline/test_conformer_features.cpp.

Parakeet: transformers' ParakeetFeatureExtractor (NeMo's AudioToMelSpectrogramPreprocessor),
run in this interpreter (/work/venv, transformers as pinned in scripts/requirements.txt).
GigaAM: gigaam.preprocess.FeatureExtractor (torchaudio MelSpectrogram + log clamp), run by the
interpreter in $GIGAAM_PYTHON (a venv with gigaam==0.1.0; default /work/gigaamvenv/bin/python).

Writes tests/fixtures/conformer/frontend/: <case>.samples.f32 (input), <family>.<case>.f32
(features [n_mels, frames] little-endian f32, only the valid frames) and frontend.json.
Usage: python scripts/make_conformer_frontend_fixtures.py
"""
import json
import os
import subprocess
import sys
import wave

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "conformer", "frontend")


def signals():
    rng = np.random.default_rng(10)
    t = np.arange(16000) / 16000.0
    tone = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 1500 * t) + 0.01 * rng.standard_normal(16000)
    n = 12345  # not a multiple of the hop
    t2 = np.arange(n) / 16000.0
    chirp = 0.2 * np.sin(2 * np.pi * (200 + 3000 * t2) * t2) + 0.02 * rng.standard_normal(n)
    with wave.open(os.path.join(ROOT, "tests", "fixtures", "audio", "speech16k.wav")) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    speech = pcm[8000 : 8000 + 20037].astype(np.float32) / 32768.0
    short = 0.05 * rng.standard_normal(1000)
    return {"tone": tone, "chirp": chirp, "speech": speech, "short": short}


def gigaam_part():
    """Runs in the gigaam venv: reads the samples, writes gigaam.<case>.f32."""
    import torch
    from gigaam.preprocess import FeatureExtractor

    manifest = json.load(open(os.path.join(OUT, "frontend.json")))
    for n_mels in (64,):
        fe = FeatureExtractor(16000, n_mels)
        for case in manifest["cases"]:
            x = np.fromfile(os.path.join(OUT, case + ".samples.f32"), dtype="<f4")
            feats, length = fe(torch.from_numpy(x)[None], torch.tensor([len(x)]))
            f = feats[0, :, : int(length[0])].numpy().astype("<f4")
            f.tofile(os.path.join(OUT, f"gigaam{n_mels}.{case}.f32"))
            print("gigaam", n_mels, case, f.shape)


def main():
    if "--gigaam" in sys.argv:
        return gigaam_part()
    from transformers import ParakeetFeatureExtractor

    os.makedirs(OUT, exist_ok=True)
    cases = signals()
    manifest = {"cases": {}, "sets": {}}
    for name, x in cases.items():
        x = np.asarray(x, dtype="<f4")
        x.tofile(os.path.join(OUT, name + ".samples.f32"))
        manifest["cases"][name] = len(x)
    for n_mels in (80, 128):
        fe = ParakeetFeatureExtractor(feature_size=n_mels)
        for name in cases:
            x = np.fromfile(os.path.join(OUT, name + ".samples.f32"), dtype="<f4")
            out = fe(x, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
            valid = int(out["attention_mask"][0].sum())
            f = out["input_features"][0, :valid].T.numpy().astype("<f4")  # [n_mels, frames]
            f.tofile(os.path.join(OUT, f"parakeet{n_mels}.{name}.f32"))
            print("parakeet", n_mels, name, f.shape)
        manifest["sets"][f"parakeet{n_mels}"] = n_mels
    manifest["sets"]["gigaam64"] = 64
    json.dump(manifest, open(os.path.join(OUT, "frontend.json"), "w"), indent=1)
    gigaam_python = os.environ.get("GIGAAM_PYTHON", "/work/gigaamvenv/bin/python")
    subprocess.run([gigaam_python, os.path.abspath(__file__), "--gigaam"], check=True)


if __name__ == "__main__":
    main()
