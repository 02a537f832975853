#!/usr/bin/env python3
"""Reference word timestamps for tests/pipeline/test_whisper_timing.cpp, made with openai-whisper.

openai-whisper (PyPI openai-whisper==20250625) is the reference: its transcribe(word_timestamps=True)
is what the engine follows (whisper/timing.py). It runs here on the SAME weights as the engine's
model store: model.baked of ~/.cache/xdna-engine/models/<model> (the CTranslate2 float16 weights of
OpenAI's checkpoint, imported with transformers names; read here as in scripts/check_ct2_import.py)
is renamed to openai-whisper's names and loaded strictly into whisper.model.Whisper (f32 compute),
with the alignment heads of the store's config.json (checked equal to openai-whisper's own
_ALIGNMENT_HEADS table for the model). Decoding: greedy at temperature 0 only (no fallback), so that
the engine decodes the same tokens; language "en"; other options upstream's defaults.

Clips: the committed tests/fixtures/audio/speech16k.wav and librivox_0870.mp3, and "librivox_x5"
(librivox_0870 five times over, ~36 s: two windows, exercising the seek to the last word's end).
Audio is decoded with the ffmpeg CLI (openai-whisper's load_audio), as the engine does with
libavcodec.

Writes tests/fixtures/word_timestamps/<model>.json: per clip the text, and per segment its start,
end, text, tokens and words [{word, start, end, probability}].

Also (no model needed, --unit-only writes just these) units.json:
  - upstream's median_filter (width 7) and dtw_cpu on small seeded random matrices;
  - the cross-attention weights (softmax, eager attention) of every decoder layer and head of
    transformers' WhisperForConditionalGeneration for the random-init tests/fixtures/whisper/
    tiny-random model, on its reference mel and tokens (scripts/make_whisper_fixtures.py), which
    WhisperModel::cross_attention_scores must reproduce after a softmax.

  /work/venv/bin/python scripts/make_word_timestamp_fixtures.py --model whisper-tiny.en --name tiny.en
"""
import argparse
import base64
import gzip
import json
import os
import sys

import numpy as np
import torch
import whisper
from whisper.model import ModelDimensions, Whisper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_ct2_import import read_baked  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUDIO = os.path.join(ROOT, "tests", "fixtures", "audio")


def openai_name(hf):
    """transformers' Whisper tensor name -> openai-whisper's."""
    n = hf[len("model."):] if hf.startswith("model.") else hf
    for a, b in [
        ("encoder.embed_positions.weight", "encoder.positional_embedding"),
        ("decoder.embed_positions.weight", "decoder.positional_embedding"),
        ("decoder.embed_tokens.weight", "decoder.token_embedding.weight"),
        ("encoder.layer_norm.", "encoder.ln_post."),
        ("decoder.layer_norm.", "decoder.ln."),
        (".layers.", ".blocks."),
        (".self_attn_layer_norm.", ".attn_ln."),
        (".encoder_attn_layer_norm.", ".cross_attn_ln."),
        (".final_layer_norm.", ".mlp_ln."),
        (".self_attn.", ".attn."),
        (".encoder_attn.", ".cross_attn."),
        (".q_proj.", ".query."),
        (".k_proj.", ".key."),
        (".v_proj.", ".value."),
        (".out_proj.", ".out."),
        (".fc1.", ".mlp.0."),
        (".fc2.", ".mlp.2."),
    ]:
        n = n.replace(a, b)
    return n


def load_model(model_dir, name):
    config = json.load(open(os.path.join(model_dir, "config.json")))
    _, tensors = read_baked(os.path.join(model_dir, "model.baked"))
    dims = ModelDimensions(
        n_mels=config["num_mel_bins"], n_audio_ctx=config["max_source_positions"],
        n_audio_state=config["d_model"], n_audio_head=config["encoder_attention_heads"],
        n_audio_layer=config["encoder_layers"], n_vocab=config["vocab_size"],
        n_text_ctx=config["max_target_positions"], n_text_state=config["d_model"],
        n_text_head=config["decoder_attention_heads"], n_text_layer=config["decoder_layers"])
    model = Whisper(dims)
    state = {openai_name(k): torch.from_numpy(v.astype(np.float32)) for k, v in tensors.items()
             if k != "proj_out.weight"}  # tied to the token embedding in openai-whisper
    model.load_state_dict(state, strict=True)
    model.eval()
    # Alignment heads: the store's config.json, which must equal openai-whisper's table.
    heads = config["alignment_heads"]
    table = np.frombuffer(gzip.decompress(base64.b85decode(whisper._ALIGNMENT_HEADS[name])), dtype=bool)
    table = table.reshape(dims.n_text_layer, dims.n_text_head)
    mask = np.zeros_like(table)
    for layer, head in heads:
        mask[layer, head] = True
    assert (mask == table).all(), "config.json alignment_heads differ from openai-whisper's table"
    model.register_buffer("alignment_heads", torch.from_numpy(mask).to_sparse(), persistent=False)
    return model, heads


def write_unit_fixtures(dst_dir):
    from safetensors.torch import load_file
    from transformers import WhisperForConditionalGeneration
    from whisper.timing import dtw_cpu, median_filter

    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 12)).astype(np.float32)
    filtered = median_filter(torch.from_numpy(x), 7).numpy()
    cost = rng.standard_normal((6, 10))
    text, time = dtw_cpu(cost)
    units = {"median_input": x.tolist(), "median_width": 7, "median_output": filtered.tolist(),
             "dtw_input": cost.tolist(), "dtw_text": text.tolist(), "dtw_time": time.tolist()}

    wdir = os.path.join(ROOT, "tests", "fixtures", "whisper")
    model = WhisperForConditionalGeneration.from_pretrained(os.path.join(wdir, "tiny-random"),
                                                            attn_implementation="eager").eval()
    ref = load_file(os.path.join(wdir, "reference.safetensors"))
    meta = json.load(open(os.path.join(wdir, "reference.json")))
    tokens = meta["prompt"] + meta["steps"]  # the 7 tokens of its full_logits
    with torch.no_grad():
        out = model(input_features=ref["mel"][None], decoder_input_ids=torch.tensor([tokens]),
                    output_attentions=True)
    cross = torch.stack([a[0] for a in out.cross_attentions])  # [layers, heads, tokens, frames]
    units["cross_tokens"] = tokens
    units["cross_attentions"] = cross.numpy().tolist()
    units["cross_logits"] = out.logits[0].numpy().tolist()
    with open(os.path.join(dst_dir, "units.json"), "w") as f:
        json.dump(units, f)
        f.write("\n")
    print("wrote", os.path.join(dst_dir, "units.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="whisper-tiny.en", help="model name in the store")
    ap.add_argument("--name", default="tiny.en", help="openai-whisper's name of the same model")
    ap.add_argument("--store", default=os.path.expanduser("~/.cache/xdna-engine/models"))
    ap.add_argument("--unit-only", action="store_true", help="write units.json only")
    args = ap.parse_args()
    torch.set_num_threads(2)
    dst_dir = os.path.join(ROOT, "tests", "fixtures", "word_timestamps")
    os.makedirs(dst_dir, exist_ok=True)
    write_unit_fixtures(dst_dir)
    if args.unit_only:
        return
    model, heads = load_model(os.path.join(args.store, args.model), args.name)

    librivox = whisper.load_audio(os.path.join(AUDIO, "librivox_0870.mp3"))
    clips = {
        "speech16k.wav": whisper.load_audio(os.path.join(AUDIO, "speech16k.wav")),
        "librivox_0870.mp3": librivox,
        "librivox_x5": np.concatenate([librivox] * 5),
    }
    out = {"model": args.model, "reference": "openai-whisper 20250625, same weights (f32 compute)",
           "options": {"temperature": 0.0, "beam_size": 1, "language": "en", "word_timestamps": True},
           "alignment_heads": heads, "clips": {}}
    for clip, audio in clips.items():
        r = whisper.transcribe(model, audio, temperature=0.0, beam_size=None, language="en",
                               word_timestamps=True, fp16=False, verbose=None)
        out["clips"][clip] = {
            "samples": int(len(audio)),
            "text": r["text"],
            "segments": [{
                "start": s["start"], "end": s["end"], "text": s["text"], "tokens": list(map(int, s["tokens"])),
                "words": [{"word": w["word"], "start": float(w["start"]), "end": float(w["end"]),
                           "probability": float(w["probability"])} for w in s.get("words", [])],
            } for s in r["segments"]],
        }
        print(clip, repr(r["text"]), sum(len(s.get("words", [])) for s in r["segments"]), "words")
    dst = os.path.join(dst_dir, args.model + ".json")
    with open(dst, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", dst)


if __name__ == "__main__":
    main()
