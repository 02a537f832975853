#!/usr/bin/env python3
"""Tiny random-init decoder LLMs of each family and their transformers (f32) reference logits.

For each config below, writes tests/fixtures/decoders/<name>/:
  config.json, model.safetensors   the checkpoint as transformers saves it
  model.gguf                        the same weights as llama.cpp's converter would write them
                                    (tensor names, metadata, llama q/k row permutation, gemma
                                    norms stored as 1 + w, llama3 scaling as rope_freqs.weight)
  reference.safetensors             prompt [64] i32, decoded [32] i32 (greedy),
                                    prefill_logits [64, V] f32 (every prompt row),
                                    decode_logits [32, V] f32 (step j feeds decoded[j])

Weights are drawn wider than the default init so logits spread over several units and greedy
choices are not near-ties. Run from the repo root with the pinned venv (scripts/requirements.txt):
  /work/venv/bin/python scripts/make_decoder_fixtures.py
"""
import json
import os

import gguf
import numpy as np
import torch
from safetensors.torch import save_file
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM
from transformers import Qwen3Config, Qwen3ForCausalLM

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "decoders")
PROMPT_LEN, DECODE_STEPS = 64, 32
VOCAB = 128

COMMON = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, head_dim=16,
              max_position_embeddings=128, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
              pad_token_id=0)

MODELS = {
    "llama": (LlamaForCausalLM, LlamaConfig(
        **COMMON, intermediate_size=64, num_hidden_layers=2, num_key_value_heads=2,
        rope_theta=10000.0, tie_word_embeddings=False)),
    "llama3": (LlamaForCausalLM, LlamaConfig(
        **COMMON, intermediate_size=64, num_hidden_layers=2, num_key_value_heads=1,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32})),
    "qwen3": (Qwen3ForCausalLM, Qwen3Config(
        **COMMON, intermediate_size=64, num_hidden_layers=2, num_key_value_heads=2,
        rope_theta=1000000.0, tie_word_embeddings=True)),
    # Interleaved local/global layers, a window (16) much shorter than the prompt, linear RoPE
    # scaling on the global layers, query_pre_attn_scalar = head_dim as llama.cpp assumes.
    "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig(
        **COMMON, intermediate_size=32, num_hidden_layers=4, num_key_value_heads=1,
        query_pre_attn_scalar=16, sliding_window=16,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        tie_word_embeddings=True)),
}


def randomize(model, family, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name:  # gemma norms are (1 + w): keep the effective scale near 1
                p.copy_((0.0 if family == "gemma3" else 1.0) + 0.2 * noise)
            elif "embed" in name:
                p.copy_(0.2 * noise if family != "gemma3" else 0.1 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)


def reference(model, prompt):
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        prefill = out.logits[0].float()
        past = out.past_key_values
        decoded, steps = [int(prefill[-1].argmax())], []
        for j in range(DECODE_STEPS):
            out = model(torch.tensor([[decoded[j]]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
            steps.append(logits)
            if j + 1 < DECODE_STEPS:
                decoded.append(int(logits.argmax()))
    return prefill, torch.tensor(decoded, dtype=torch.int32), torch.stack(steps)


def permute_rows(w, n_head):
    """llama.cpp's converter: q/k rows from half-split (HF) to interleaved RoPE pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg):
    """llama.cpp's converter writes llama3 scaling as per-pair divisors (rope_freqs.weight)."""
    rp = cfg.rope_parameters
    base, dim = rp["rope_theta"], cfg.head_dim
    factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp["original_max_position_embeddings"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    low_wavelen, high_wavelen = old / lo, old / hi
    out = []
    for f in freqs.tolist():
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path, family, cfg, state):
    arch = family if family != "llama3" else "llama"
    w = gguf.GGUFWriter(path, arch)
    w.add_name(family + "-tiny-random")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_vocab_size(cfg.vocab_size)
    rp = cfg.rope_parameters
    if family == "gemma3":
        w.add_rope_freq_base(rp["full_attention"]["rope_theta"])
        w.add_sliding_window(cfg.sliding_window)
        # llama.cpp assumes every 6th layer global; the tiny model alternates, so say so (the
        # engine reads this optional key, an integer period).
        period = cfg.layer_types.index("full_attention") + 1
        w.add_uint32("gemma3.attention.sliding_window_pattern", period)
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rp["full_attention"]["factor"])
    else:
        w.add_rope_freq_base(rp["rope_theta"])
    # A placeholder vocabulary, so the file carries what a real one does.
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>".encode() for i in range(cfg.vocab_size)])
    w.add_token_scores([0.0] * cfg.vocab_size)
    w.add_token_types([1] * cfg.vocab_size)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)

    if family == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(cfg))
    sd = {k: v.float().numpy() for k, v in state.items()}
    norm_shift = 1.0 if family == "gemma3" else 0.0  # converter: gemma norm weights + 1
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    if not cfg.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"] + norm_shift)
    for i in range(cfg.num_hidden_layers):
        L = f"model.layers.{i}."
        q, k = sd[L + "self_attn.q_proj.weight"], sd[L + "self_attn.k_proj.weight"]
        if arch == "llama":
            q = permute_rows(q, cfg.num_attention_heads)
            k = permute_rows(k, cfg.num_key_value_heads)
        names = {"attn_q": q, "attn_k": k, "attn_v": sd[L + "self_attn.v_proj.weight"],
                 "attn_output": sd[L + "self_attn.o_proj.weight"],
                 "ffn_gate": sd[L + "mlp.gate_proj.weight"], "ffn_up": sd[L + "mlp.up_proj.weight"],
                 "ffn_down": sd[L + "mlp.down_proj.weight"],
                 "attn_norm": sd[L + "input_layernorm.weight"] + norm_shift}
        if family == "gemma3":
            names["post_attention_norm"] = sd[L + "post_attention_layernorm.weight"] + norm_shift
            names["ffn_norm"] = sd[L + "pre_feedforward_layernorm.weight"] + norm_shift
            names["post_ffw_norm"] = sd[L + "post_feedforward_layernorm.weight"] + norm_shift
        else:
            names["ffn_norm"] = sd[L + "post_attention_layernorm.weight"]
        if family in ("qwen3", "gemma3"):
            names["attn_q_norm"] = sd[L + "self_attn.q_norm.weight"] + norm_shift
            names["attn_k_norm"] = sd[L + "self_attn.k_norm.weight"] + norm_shift
        for n, t in names.items():
            w.add_tensor(f"blk.{i}.{n}.weight", np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    torch.manual_seed(0)
    for family, (cls, cfg) in MODELS.items():
        gen = torch.Generator().manual_seed(1234)
        model = cls(cfg).float().eval()
        randomize(model, family.rstrip("3") if family == "llama3" else family, gen)
        d = os.path.join(OUT, family)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(d, extra)):
                os.remove(os.path.join(d, extra))
        prompt = torch.randint(3, VOCAB, (PROMPT_LEN,), generator=gen).tolist()
        prefill, decoded, steps = reference(model, prompt)
        save_file({"prompt": torch.tensor(prompt, dtype=torch.int32), "decoded": decoded,
                   "prefill_logits": prefill.contiguous(), "decode_logits": steps.contiguous()},
                  os.path.join(d, "reference.safetensors"))
        state = {k: v for k, v in model.state_dict().items()}
        write_gguf(os.path.join(d, "model.gguf"), family, cfg, state)
        print(f"{family}: max|logit| prefill {prefill.abs().max():.3f}, decode {steps.abs().max():.3f}, "
              f"decoded {decoded.tolist()[:8]}...")


if __name__ == "__main__":
    main()
