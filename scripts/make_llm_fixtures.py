#!/usr/bin/env python3
"""Writes tests/fixtures/llm/tiny-llama-chat/: a complete tiny chat LLM for the generation tests.

  config.json, model.safetensors  random-init LlamaForCausalLM (f32; 2 layers, GQA 4/2 heads,
                                  hidden 64, 128 positions), re-randomised with large weights so
                                  that greedy choices are far from ties
  tokenizer.json                  byte-level BPE (384 ids) trained here on the tokenizer corpus,
                                  TemplateProcessing that prepends <s>
  tokenizer_config.json           bos/eos tokens, add_bos_token, a ChatML-style chat_template
  generation_config.json          eos_token_id [</s>, <|im_end|>]
  reference.json                  test data, not part of the model: per case the prompt text, its
                                  ids, and transformers' greedy generate() ids and decoded text;
                                  the chat template rendered by apply_chat_template

Needs torch, transformers, tokenizers (scripts/requirements.txt).
Usage: python scripts/make_llm_fixtures.py
"""
import json
import os
import shutil

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "llm", "tiny-llama-chat")
CORPUS = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "corpus.jsonl")

SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
VOCAB = 384
MAX_NEW = 24

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

PLAIN_PROMPTS = [
    "The quick brown fox",
    "Hello, world! Caf\u00e9 d\u00e9j\u00e0 vu",
    "1 2 3 4",
]
CHATS = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}],
]


def train_tokenizer() -> Tokenizer:
    with open(CORPUS, encoding="utf-8") as f:
        texts = [json.loads(line) for line in f if line.strip()]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 0)])
    return tok


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)

    tok = train_tokenizer()
    assert [tok.token_to_id(s) for s in SPECIALS] == [0, 1, 2, 3]
    vocab = tok.get_vocab_size()
    tok.save(os.path.join(OUT, "tokenizer.json"))
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>",
        "add_bos_token": True, "add_eos_token": False,
        "model_max_length": 128,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, indent=2)
    hf_tok = PreTrainedTokenizerFast.from_pretrained(OUT)

    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=False, bos_token_id=0, eos_token_id=[1, 3])
    model = LlamaForCausalLM(config).eval().to(torch.float32)
    with torch.no_grad():  # large weights: logits spread far apart, so greedy is robust to rounding
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 if "embed" in name or "lm_head" in name else 0.15))
    model.generation_config.eos_token_id = [1, 3]
    model.generation_config.bos_token_id = 0
    model.generation_config.pad_token_id = 1
    model.save_pretrained(OUT, safe_serialization=True)

    cases = []
    prompts = [("plain", p, None) for p in PLAIN_PROMPTS]
    prompts += [("chat", hf_tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True), c) for c in CHATS]
    for kind, text, messages in prompts:
        # Plain text: <s> + text (the post-processor); a rendered chat already starts with <s>.
        ids = hf_tok(text, add_special_tokens=(kind == "plain")).input_ids
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
                                 output_scores=True, return_dict_in_generate=True)
        gen = out.sequences[0, len(ids):].tolist()
        # Smallest gap between the best and second-best logit, relative to the largest |logit|:
        # the engine may differ from torch by ~1e-5 of that, so a gap well above it is a safe tie.
        margin = min(float((torch.topk(s[0], 2).values[0] - torch.topk(s[0], 2).values[1]) / s[0].abs().max())
                     for s in out.scores)
        case = {"kind": kind, "prompt": text, "prompt_ids": ids, "greedy_ids": gen,
                "greedy_text": hf_tok.decode([g for g in gen if g not in (1, 3)], skip_special_tokens=True),
                "min_top2_margin": margin}
        if messages:
            case["messages"] = messages
        cases.append(case)
        print(f"{kind}: {len(ids)} prompt ids, {len(gen)} generated, min relative top-2 margin {margin:.2e}")
    import transformers
    import tokenizers
    ref = {"made_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "tokenizers": tokenizers.__version__},
           "max_new_tokens": MAX_NEW, "eos_token_ids": [1, 3], "cases": cases}
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
    print("wrote", OUT, sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()
