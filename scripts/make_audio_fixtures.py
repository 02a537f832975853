#!/usr/bin/env python3
"""Audio decoding and log-mel fixtures (tests/fixtures/audio, read by tests/pipeline/test_audio.cpp).

Makes a short espeak-ng clip of a committed sentence (16 kHz mono 16-bit WAV), the same clip
re-encoded as FLAC, MP3, OGG/Vorbis, Opus and M4A/AAC, a 44.1 kHz stereo WAV of its first 1.25 s
(left = clip, right = clip / 2, so the mono average is 0.75 x clip), a file with no audio stream,
and openai-whisper's log_mel_spectrogram of the clip and of the first LibriVox clip of Debian's
pocketsphinx-testdata, for 80 and 128 mel bins, with and without 30 s of padding. Also checks a
numpy Slaney mel filterbank (librosa.filters.mel's definition) against whisper's shipped
mel_filters.npz and stores a few of its rows.

Needs the /work/venv pins (openai-whisper==20250625, torch, numpy) and the ffmpeg and espeak-ng
CLIs. Run: /work/venv/bin/python scripts/make_audio_fixtures.py
"""
import glob
import json
import os
import subprocess
import tempfile

import numpy as np
import torch
import whisper.audio as wa

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "audio")
SENTENCE = "Whisper listens to the quick brown fox near the river."
SAMPLED = 2000  # entries kept of a mel too big to store whole
rng = np.random.default_rng(1234)


def run(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def ffmpeg(*args):  # -bitexact keeps encoder version strings out of the files
    run("ffmpeg", "-nostdin", "-y", "-loglevel", "error", *args)


def slaney_mel(sr, n_fft, n_mels):
    """librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels) (htk=False, norm='slaney'), in f64."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f):
        f = np.asanyarray(f, dtype=np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-300) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m):
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    fftfreqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2.0), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    # librosa stores the triangles in f32, then scales them in f64 and rounds again
    weights = np.maximum(0, np.minimum(lower, upper)).astype(np.float32)
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights


def mel_entry(name, audio, n_mels, padding, full):
    mel = wa.log_mel_spectrogram(torch.from_numpy(audio), n_mels, padding).numpy().astype(np.float32)
    e = {"clip": name, "n_mels": n_mels, "padding": padding, "shape": list(mel.shape),
         "min": float(mel.min()), "max": float(mel.max()), "mean": float(mel.astype(np.float64).mean())}
    base = f"mel_{name}_{n_mels}_{'pad' if padding else 'nopad'}"
    if full:
        e["file"] = base + ".f32"
        mel.tofile(os.path.join(OUT, e["file"]))
    else:  # sampled: int32 flat indices then f32 values, little-endian
        idx = np.sort(rng.choice(mel.size, SAMPLED, replace=False)).astype("<i4")
        e["file"], e["sampled"] = base + ".idx", SAMPLED
        with open(os.path.join(OUT, e["file"]), "wb") as f:
            f.write(idx.tobytes())
            f.write(mel.reshape(-1)[idx].astype("<f4").tobytes())
    return e


def main():
    os.makedirs(OUT, exist_ok=True)
    meta = {"sentence": SENTENCE}
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "espeak.wav")
        run("espeak-ng", "-w", raw, SENTENCE)
        wav = os.path.join(OUT, "speech16k.wav")
        ffmpeg("-i", raw, "-ar", "16000", "-ac", "1", "-c:a", "pcm_s16le", "-bitexact", wav)
    enc = {"speech.flac": ["-c:a", "flac"], "speech.mp3": ["-c:a", "libmp3lame", "-b:a", "32k"],
           "speech.ogg": ["-c:a", "libvorbis", "-q:a", "0"], "speech.opus": ["-c:a", "libopus", "-b:a", "24k"],
           "speech.m4a": ["-c:a", "aac", "-b:a", "32k"]}
    for name, args in enc.items():
        ffmpeg("-i", wav, *args, "-bitexact", os.path.join(OUT, name))
    ffmpeg("-i", wav, "-t", "1.25", "-af", "pan=stereo|c0=c0|c1=0.5*c0", "-ar", "44100", "-c:a", "pcm_s16le",
           "-bitexact", os.path.join(OUT, "speech44k_stereo.wav"))
    ffmpeg("-f", "lavfi", "-i", "color=c=blue:s=16x16:d=0.04", "-frames:v", "1", "-c:v", "ffv1", "-bitexact",
           os.path.join(OUT, "video_only.mkv"))

    audio = wa.load_audio(wav)  # int16 / 32768 through the ffmpeg CLI
    meta["speech_samples"] = int(audio.size)
    mels = []
    for n_mels in (80, 128):
        mels.append(mel_entry("speech", audio, n_mels, 0, full=True))
        mels.append(mel_entry("speech", audio, n_mels, wa.N_SAMPLES, full=False))
    libri = sorted(glob.glob("/usr/share/pocketsphinx*/**/librivox/*.wav", recursive=True))
    if libri:
        # The quick start's MP3 (make run): real read speech, public domain (LibriVox).
        ffmpeg("-i", libri[0], "-c:a", "libmp3lame", "-b:a", "32k", "-bitexact",
               os.path.join(OUT, "librivox_0870.mp3"))
        la = wa.load_audio(libri[0])
        meta["librivox"] = {"file": os.path.basename(libri[0]), "samples": int(la.size)}
        for n_mels in (80, 128):
            for padding in (0, wa.N_SAMPLES):
                mels.append(mel_entry("librivox", la, n_mels, padding, full=False))
    meta["mels"] = mels

    # Mel filterbank: our numpy Slaney definition against whisper's shipped mel_filters.npz.
    shipped = np.load(os.path.join(os.path.dirname(wa.__file__), "assets", "mel_filters.npz"))
    meta["filterbank"] = {}
    for n_mels, rows in ((80, (0, 1, 20, 40, 79)), (128, (0, 63, 127))):
        ours, ref = slaney_mel(16000, 400, n_mels), shipped[f"mel_{n_mels}"]
        err = float(np.abs(ours - ref).max())
        assert err == 0, (n_mels, err)  # bit-exact
        meta["filterbank"][str(n_mels)] = {"numpy_vs_shipped_max_abs_err": err,
                                           "rows": {str(r): ref[r].tolist() for r in rows}}
    with open(os.path.join(OUT, "audio.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
