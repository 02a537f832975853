#!/usr/bin/env python3
"""Reference transcripts for tests/pipeline/test_transcribe.cpp, made with faster-whisper.

Runs faster-whisper (PyPI faster-whisper==1.2.1, CTranslate2 backend, f32 compute) on the
LibriVox and cards clips of Debian's pocketsphinx-testdata, and on "long.wav" (all of them
concatenated in the order below, ~34 s, to exercise seeking across windows), with beam_size 5 and
beam_size 1, the default temperature ladder, no VAD, condition_on_previous_text=True,
language "en". Writes tests/fixtures/transcribe/<model>_beam<N>.json: per clip the text and the
segments (start, end, text, avg_logprob, no_speech_prob, temperature). Also writes
<model>_tokens.json: the special token ids and the suppressed-token list ("-1" default:
non-speech symbols + special tokens) faster-whisper computes from the model's tokenizer.json.

Usage (in a venv with faster-whisper; /work/benchvenv here):
  python scripts/make_transcribe_fixtures.py --model-dir /path/to/ctranslate2/tiny.en --name whisper-tiny.en
"""
import argparse
import json
import os
import wave

import numpy as np
import tokenizers
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer
from faster_whisper.transcribe import get_suppressed_tokens

CLIP_DIR = "/usr/share/pocketsphinx/test/data"
CLIPS = [
    "librivox/sense_and_sensibility_01_austen_64kb-0870.wav",
    "librivox/sense_and_sensibility_01_austen_64kb-0880.wav",
    "librivox/sense_and_sensibility_01_austen_64kb-0890.wav",
    "librivox/sense_and_sensibility_01_austen_64kb-0920.wav",
    "librivox/sense_and_sensibility_01_austen_64kb-0930.wav",
    "cards/001.wav",
    "cards/002.wav",
    "cards/003.wav",
    "cards/004.wav",
    "cards/005.wav",
]


def read_wav(path):
    # The clips are 16 kHz mono s16le: read them exactly (x / 32768), as the engine's decoder does.
    with wave.open(path) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return data.astype(np.float32) / 32768.0


def run(model, audio, beam_size):
    segments, info = model.transcribe(
        audio, language="en", task="transcribe", beam_size=beam_size, best_of=5,
        vad_filter=False, condition_on_previous_text=True, word_timestamps=False)
    segs = [dict(start=round(s.start, 3), end=round(s.end, 3), text=s.text,
                 avg_logprob=round(s.avg_logprob, 4), no_speech_prob=round(s.no_speech_prob, 4),
                 temperature=s.temperature) for s in segments]
    return dict(text="".join(s["text"] for s in segs).strip(), duration=round(info.duration, 3),
                segments=segs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures", "transcribe"))
    ap.add_argument("--tokens-only", action="store_true")
    args = ap.parse_args()
    hf = tokenizers.Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    multilingual = hf.token_to_id("<|en|>") is not None and hf.get_vocab_size() >= 51865
    tok = Tokenizer(hf, multilingual)
    special = {k: getattr(tok, k) for k in ("eot", "sot", "translate", "transcribe", "sot_prev",
                                            "sot_lm", "no_speech", "no_timestamps",
                                            "timestamp_begin")}
    path = os.path.join(args.out, f"{args.name}_tokens.json")
    with open(path, "w") as f:
        json.dump(dict(generator="faster-whisper 1.2.1 tokenizer", model=args.name, **special,
                       blank=hf.encode(" ", add_special_tokens=False).ids + [tok.eot],
                       suppress_tokens=list(get_suppressed_tokens(tok, [-1]))), f, indent=1)
        f.write("\n")
    print("wrote", path)
    if args.tokens_only:
        return
    model = WhisperModel(args.model_dir, device="cpu", compute_type="float32", cpu_threads=2)
    audios = {c: read_wav(os.path.join(CLIP_DIR, c)) for c in CLIPS}
    audios["long.wav"] = np.concatenate([audios[c] for c in CLIPS])
    for beam in (5, 1):
        out = dict(generator="faster-whisper 1.2.1, compute_type float32, vad_filter False",
                   model=args.name, beam_size=beam, language="en", clip_dir=CLIP_DIR,
                   long_clip="long.wav = the other clips concatenated in this order",
                   clips={c: run(model, a, beam) for c, a in audios.items()})
        path = os.path.join(args.out, f"{args.name}_beam{beam}.json")
        with open(path, "w") as f:
            json.dump(out, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print("wrote", path)


if __name__ == "__main__":
    main()
