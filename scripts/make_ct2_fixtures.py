#!/usr/bin/env python3
"""Makes tests/fixtures/ct2/: a random-init tiny transformers Whisper (safetensors, f32) and the
same model converted by CTranslate2's own converter to model.bin at float32 and float16.
tests/weights/test_ctranslate2.cpp imports the model.bin files and checks that every tensor
equals the transformers one (f16: exactly its f16 rounding).

Run with the /work/venv interpreter (torch, transformers, tokenizers); CTranslate2's Python
package is taken from a second environment (--ct2-site, the faster-whisper venv) appended to
sys.path, so that /work/venv's numpy and torch stay first. Pinned in scripts/requirements.txt.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, WhisperConfig, WhisperForConditionalGeneration

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
            "<|notimestamps|>"]


def make_tokenizer(vocab_size):
    words = ["a", "b", "c", "hello", "world", "the", "cat", "sat"]
    vocab = {w: i for i, w in enumerate(words)}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    while len(vocab) < vocab_size:  # timestamp tokens fill the rest, as in Whisper
        vocab["<|%.2f|>" % ((len(vocab) - len(words) - len(SPECIALS)) * 0.02)] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   bos_token="<|startoftranscript|>",
                                   additional_special_tokens=SPECIALS[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures", "ct2"))
    ap.add_argument("--ct2-site", default="/work/benchvenv/lib/python3.11/site-packages")
    args = ap.parse_args()
    sys.path.append(args.ct2_site)
    import ctranslate2  # noqa: E402

    torch.manual_seed(6)
    vocab = 64
    cfg = WhisperConfig(vocab_size=vocab, num_mel_bins=16, d_model=32, encoder_layers=2,
                        encoder_attention_heads=4, decoder_layers=2, decoder_attention_heads=4,
                        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=24,
                        max_target_positions=16, pad_token_id=8, bos_token_id=9, eos_token_id=8,
                        decoder_start_token_id=9)
    model = WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # every value random and non-zero, biases included
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    gen = model.generation_config
    gen.suppress_tokens = [1, 2]
    gen.begin_suppress_tokens = [8]
    # Not carried through save/load by transformers 5.24: CTranslate2 then writes its defaults
    # (alignment_heads = every head of the second half of the layers, lang_ids = []).
    gen.alignment_heads = [[1, 0], [1, 3]]
    gen.lang_to_id = {"<|en|>": 10, "<|de|>": 11}

    out = os.path.abspath(args.out)
    hf_dir = os.path.join(out, "hf")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(hf_dir)
    model.save_pretrained(hf_dir, safe_serialization=True)
    tok = make_tokenizer(vocab)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        for q, name in (("float32", "whisper_f32"), ("float16", "whisper_f16")):
            conv = ctranslate2.converters.TransformersConverter(tmp)
            conv.convert(os.path.join(out, name), quantization=q, force=True)
            # faster-whisper packages ship tokenizer.json next to model.bin; the converter does not.
            shutil.copy(os.path.join(tmp, "tokenizer.json"), os.path.join(out, name))
        shutil.copy(os.path.join(tmp, "tokenizer.json"), hf_dir)
    for f in ("generation_config.json",):
        p = os.path.join(hf_dir, f)
        if os.path.exists(p):
            os.remove(p)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("Made by scripts/make_ct2_fixtures.py (random-init tiny Whisper, seed 6):\n"
                "hf/ transformers safetensors f32; whisper_f32/ and whisper_f16/ the same model\n"
                "converted by ctranslate2 %s TransformersConverter.\n" % ctranslate2.__version__)
    for root, _, files in os.walk(out):
        for fn in sorted(files):
            print(os.path.relpath(os.path.join(root, fn), out),
                  os.path.getsize(os.path.join(root, fn)))


if __name__ == "__main__":
    main()
