#!/usr/bin/env python3
"""ASR accuracy: word error rate of this engine, faster-whisper (int8, f32) and whisper.cpp on the
same clips with the same model and decoding settings (issue 6: this engine within 0.5 points of
faster-whisper, at f32 and at its default lower precision).

WER is jiwer's corpus WER (all clips' edits / all reference words) after openai-whisper's
EnglishTextNormalizer on both sides ("Mr." -> "mister", "eight" -> "8", punctuation and case
dropped), so spelling conventions do not count as errors. The normaliser is imported from the
openai-whisper package installed in the peers venv (bench/requirements-peers.txt); it needs only
`regex` and `more-itertools` at import time, but its package __init__ imports torch, so the
venv must have torch too (it does: the embeddings bench pins it).

Clips and engines are those of bench/asr_vs_peers.py (pocketsphinx-testdata LibriVox + cards, 30
espeak-ng clips of bench/data/asr_sentences.txt); the speed table of the same run is printed too.
Each clip's reference and hypothesis pairs can be written with --json.

Usage (peers venv):
  /work/benchvenv/bin/python bench/asr_wer.py --npu build/bin/npu --threads 2 --beam-size 5 \
      --models whisper-tiny.en whisper-base
  # this engine at f32 as well (whatever flag `npu transcribe` takes for it):
  ... --engine-args --dtype f32
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import asr_vs_peers as peers  # noqa: E402


def load_normalizer():
    try:
        from whisper.normalizers import EnglishTextNormalizer
    except ImportError as e:
        sys.exit(f"openai-whisper's normaliser is not importable ({e}): "
                 "pip install -r bench/requirements-peers.txt")
    return EnglishTextNormalizer()


def corpus_wer(references, hypotheses):
    """jiwer WER in % over the clips with a non-empty normalised reference (an empty
    hypothesis counts as all deletions)."""
    import jiwer
    pairs = [(r, h) for r, h in zip(references, hypotheses) if r.strip()]
    if not pairs:
        return None
    return 100.0 * jiwer.wer([r for r, _ in pairs], [h for _, h in pairs])


def main():
    args = peers.parse_args(description=__doc__)
    if args.child:
        return peers.child_main(args)
    normalize = load_normalizer()
    dirs = peers.ct2_dirs(args)
    with tempfile.TemporaryDirectory(prefix="asr-clips-") as work:
        clips = peers.collect_clips(work, args.sentences)
        if args.max_clips:
            clips = clips[:args.max_clips]
        groups = sorted({c.group for c in clips})
        refs = [normalize(c.reference) for c in clips]
        print(f"threads={args.threads} beam_size={args.beam_size} temperature={args.temperature} "
              f"language={args.language}; {len(clips)} clips "
              f"({', '.join(f'{g}: {sum(c.group == g for c in clips)}' for g in groups)}); "
              f"{sum(len(r.split()) for r in refs)} reference words")
        everything = {}
        for model in args.models:
            results, missing = peers.run_all(model, dirs[model], clips, args, args.engines)
            print(f"\n{model}: WER % (corpus, after EnglishTextNormalizer)")
            print(f"{'engine':22s} {'all':>6s} " + " ".join(f"{g:>8s}" for g in groups) +
                  f" {'vs fw-int8':>10s} {'vs fw-f32':>10s}")
            wers, rows = {}, {}
            for name, r in results.items():
                if r is None:
                    continue
                hyps = [normalize(t) for t in r["texts"]]
                r["normalized"] = hyps
                wers[name] = corpus_wer(refs, hyps)
                rows[name] = [corpus_wer([x for x, c in zip(refs, clips) if c.group == g],
                                         [y for y, c in zip(hyps, clips) if c.group == g])
                              for g in groups]
            for name in results:
                if name not in wers:
                    print(f"{name:22s} {'waiting':>6s}  ({missing.get(name, '')})")
                    continue
                diffs = [wers[name] - wers[b] if b in wers else None
                         for b in ("faster-whisper-int8", "faster-whisper-f32")]
                print(f"{name:22s} {wers[name]:6.2f} " + " ".join(peers.fmt(w, "8.2f") for w in rows[name]) +
                      f" {peers.fmt(diffs[0], '+10.2f')} {peers.fmt(diffs[1], '+10.2f')}")
            peers.print_speed(model, clips, results, missing, args.temperature)
            everything[model] = {"wer": wers, "results": results, "missing": missing}
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"clips": [{"name": c.name, "reference": c.reference, "normalized": r}
                                     for c, r in zip(clips, refs)], "models": everything}, f, indent=1)


if __name__ == "__main__":
    main()
