#!/usr/bin/env python3
"""Writes tests/fixtures/whisper/: a random-init tiny Whisper and transformers' outputs for it.

  tiny-random/          config.json + model.safetensors (f32): WhisperForConditionalGeneration with
                        d_model 64, 2 encoder + 2 decoder layers, 4 heads, 80 mels, vocab 200,
                        64 audio positions (mel input [80, 128]), 448 text positions
  tiny-random-f16/      the same weights rounded to f16 (config.json + model.safetensors)
  reference.safetensors transformers' outputs (f32), for the mel input stored beside them:
      mel               [80, 128] the encoder input (fixed seed)
      encoder_out       [64, 64]  last hidden state of the encoder
      steps_logits      [4, 200]  logits after the 4-token prompt, then after each of 3 single-token
                                  steps decoded with transformers' KV cache
      full_logits       [7, 200]  logits of every position of one 7-token forward (no cache)
      beams_logits      [2, 2, 200] two beams (different prompts): [beam, (after prompt, after one
                                  more token), vocab], each run separately
  reference.json        the token ids used above

Weights are re-randomised large (not the 0.02-std init), norms and biases too, so attention is far
from uniform and a wrong mask, scale, bias or position shows up in the outputs.

Needs torch, transformers, safetensors (scripts/requirements.txt).
Usage: /work/venv/bin/python scripts/make_whisper_fixtures.py
"""
import json
import os
import shutil

import torch
from safetensors.torch import load_file, save_file
from transformers import WhisperConfig, WhisperForConditionalGeneration

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "whisper")

PROMPT = [3, 17, 150, 42]
STEPS = [7, 199, 64]
BEAM_PROMPTS = [[3, 17, 150, 42], [5, 88, 1, 120]]
BEAM_NEXT = [11, 90]


def main():
    torch.manual_seed(1234)
    config = WhisperConfig(
        vocab_size=200, num_mel_bins=80, d_model=64,
        encoder_layers=2, encoder_attention_heads=4, decoder_layers=2, decoder_attention_heads=4,
        encoder_ffn_dim=256, decoder_ffn_dim=256,
        max_source_positions=64, max_target_positions=448,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        suppress_tokens=[], begin_suppress_tokens=[],
    )
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name and "encoder" in name:
                continue  # sinusoidal, as stored by real checkpoints
            if p.dim() >= 2:
                p.normal_(0.0, 0.5 / p.shape[-1] ** 0.5 * 2.0)
            elif "layer_norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
        model.model.decoder.embed_tokens.weight.normal_(0.0, 1.0)
        model.model.decoder.embed_positions.weight.normal_(0.0, 0.3)

    mel = torch.randn(80, 128) * 0.6
    ref = {}
    with torch.no_grad():
        enc = model.model.encoder(input_features=mel[None]).last_hidden_state  # [1, 64, 64]
        ref["mel"] = mel.clone()
        ref["encoder_out"] = enc[0].clone()

        def full(tokens):
            out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([tokens]), use_cache=False)
            return out.logits[0]

        # Prompt, then single steps through transformers' own cache.
        out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([PROMPT]), use_cache=True)
        steps = [out.logits[0, -1]]
        past = out.past_key_values
        for t in STEPS:
            out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([[t]]), past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
            steps.append(out.logits[0, -1])
        ref["steps_logits"] = torch.stack(steps)
        ref["full_logits"] = full(PROMPT + STEPS)
        beams = []
        for p, n in zip(BEAM_PROMPTS, BEAM_NEXT):
            lg = full(p + [n])
            beams.append(torch.stack([lg[len(p) - 1], lg[len(p)]]))
        ref["beams_logits"] = torch.stack(beams)
        gap = (ref["full_logits"][3:] - ref["steps_logits"]).abs().max().item()
        print(f"transformers cached vs full forward: max abs {gap:.2e}")

    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    f32_dir = os.path.join(OUT, "tiny-random")
    model.save_pretrained(f32_dir, safe_serialization=True)
    for extra in ("generation_config.json",):
        path = os.path.join(f32_dir, extra)
        if os.path.exists(path):
            os.remove(path)
    f16_dir = os.path.join(OUT, "tiny-random-f16")
    os.makedirs(f16_dir)
    shutil.copy(os.path.join(f32_dir, "config.json"), f16_dir)
    weights = load_file(os.path.join(f32_dir, "model.safetensors"))
    save_file({k: v.half().contiguous() for k, v in weights.items()}, os.path.join(f16_dir, "model.safetensors"),
              metadata={"format": "pt"})
    save_file({k: v.float().contiguous() for k, v in ref.items()}, os.path.join(OUT, "reference.safetensors"))
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({"prompt": PROMPT, "steps": STEPS, "beam_prompts": BEAM_PROMPTS, "beam_next": BEAM_NEXT,
                   "torch": torch.__version__, "transformers": __import__("transformers").__version__}, f, indent=1)
        f.write("\n")
    print("tensors:", sorted(weights))
    for k, v in ref.items():
        print(k, tuple(v.shape), f"max |x| {v.abs().max().item():.3f}")


if __name__ == "__main__":
    main()
