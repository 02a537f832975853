#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora, tests/fuzz/corpus/<target>/: a handful of small valid inputs
and some broken ones per target, so each fuzzer starts from the formats' real structure.

Standard library only; the audio seeds cut the first bytes of the committed audio fixtures
(a truncated MP3/Ogg/FLAC still has real headers and frames). Deterministic: rerunning it
rewrites the same files.

    python3 scripts/make_fuzz_corpus.py
"""
import io
import json
import math
import os
import struct
import wave

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors: u64 header length, JSON header, data region

def safetensors(tensors, metadata=None, header_pad=0):
    header, blob = {}, b""
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode() + b" " * header_pad
    return struct.pack("<Q", len(h)) + h + blob


def make_safetensors():
    f32 = struct.pack("<6f", 1, -2, 3.5, 0, 1e-3, -7)
    bf16 = struct.pack("<4H", 0x3F80, 0xC000, 0x7F80, 0x0001)
    write("safetensors", "f32_bf16", safetensors(
        {"w": ("F32", [2, 3], f32), "b": ("BF16", [4], bf16)}, {"format": "pt"}))
    write("safetensors", "ints_scalar", safetensors(
        {"i8": ("I8", [3], b"\x01\xff\x7f"), "u8": ("U8", [1, 1], b"\x05"), "s": ("F16", [], b"\x00\x3c"),
         "empty": ("F32", [0, 4], b""), "i64": ("I64", [1], struct.pack("<q", -1))}, header_pad=5))
    good = safetensors({"w": ("F32", [2, 3], f32)})
    write("safetensors", "truncated", good[:-5])
    write("safetensors", "bad_offsets", safetensors({"w": ("F32", [2, 3], f32)}).replace(b"[0, 24]", b"[8, 99]"))
    write("safetensors", "shape_mismatch", safetensors({"w": ("F32", [4, 4], f32)}))
    write("safetensors", "huge_header_len", struct.pack("<Q", 1 << 62) + b"{}")
    write("safetensors", "overlap", safetensors({"a": ("F32", [6], f32), "b": ("F32", [6], f32)})
          .replace(b"[24, 48]", b"[0, 24]"))


# ---- GGUF v3: header, key/values, tensor infos, aligned data

GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STR, GGUF_ARR, \
    GGUF_U64, GGUF_I64, GGUF_F64 = range(13)
SCALAR = {GGUF_U8: "<B", GGUF_I8: "<b", GGUF_U16: "<H", GGUF_I16: "<h", GGUF_U32: "<I", GGUF_I32: "<i",
          GGUF_F32: "<f", GGUF_BOOL: "<?", GGUF_U64: "<Q", GGUF_I64: "<q", GGUF_F64: "<d"}


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gvalue(t, v):
    if t == GGUF_STR:
        return gstr(v)
    if t == GGUF_ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gvalue(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kv, tensors=(), version=3, alignment=32):
    """kv: [(key, type, value)]; tensors: [(name, dims innermost first, ggml type, bytes)]."""
    out = struct.pack("<IIQQ", 0x46554747, version, len(tensors), len(kv))
    for key, t, v in kv:
        out += gstr(key) + struct.pack("<I", t) + gvalue(t, v)
    offset, blobs = 0, b""
    for name, dims, ggml_type, data in tensors:
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        pad = (-len(data)) % alignment
        blobs += data + b"\0" * pad
        offset += len(data) + pad
    out += b"\0" * ((-len(out)) % alignment)
    return out + blobs


def spm_tokenizer_kv(arch):
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in (0x0A, 0x41, 0xC3)] + \
             ["\u2581", "\u2581Hello", "\u2581world", "H", "e", "l", "o", "w", "r", "d", "ll", "\u2581w"]
    types = [2, 3, 3] + [6] * 3 + [1] * (len(pieces) - 6)
    return [("general.architecture", GGUF_STR, arch),
            ("tokenizer.ggml.model", GGUF_STR, "llama"),
            ("tokenizer.ggml.tokens", GGUF_ARR, (GGUF_STR, pieces)),
            ("tokenizer.ggml.scores", GGUF_ARR, (GGUF_F32, [-float(i) for i in range(len(pieces))])),
            ("tokenizer.ggml.token_type", GGUF_ARR, (GGUF_I32, types)),
            ("tokenizer.ggml.bos_token_id", GGUF_U32, 1), ("tokenizer.ggml.eos_token_id", GGUF_U32, 2),
            ("tokenizer.ggml.unknown_token_id", GGUF_U32, 0), ("tokenizer.ggml.add_bos_token", GGUF_BOOL, True)]


def gpt2_tokenizer_kv(pre):
    tokens = ["H", "e", "l", "o", "\u0120", "w", "r", "d", "He", "ll", "Hell", "Hello", "\u0120w", "<|end|>"]
    merges = ["H e", "l l", "He ll", "Hell o", "\u0120 w"]
    return [("general.architecture", GGUF_STR, "qwen2"),
            ("tokenizer.ggml.model", GGUF_STR, "gpt2"), ("tokenizer.ggml.pre", GGUF_STR, pre),
            ("tokenizer.ggml.tokens", GGUF_ARR, (GGUF_STR, tokens)),
            ("tokenizer.ggml.token_type", GGUF_ARR, (GGUF_I32, [1] * (len(tokens) - 1) + [3])),
            ("tokenizer.ggml.merges", GGUF_ARR, (GGUF_STR, merges)),
            ("tokenizer.ggml.eos_token_id", GGUF_U32, len(tokens) - 1)]


def make_gguf():
    f32 = struct.pack("<8f", *range(8))
    q8_0 = struct.pack("<e", 0.5) + bytes(range(32))  # one block of 32
    meta = [("general.architecture", GGUF_STR, "llama"), ("general.alignment", GGUF_U32, 32),
            ("llama.context_length", GGUF_U64, 128), ("x.f64", GGUF_F64, 2.5), ("x.i8", GGUF_I8, -3),
            ("x.nested", GGUF_ARR, (GGUF_ARR, [(GGUF_U16, [1, 2]), (GGUF_STR, ["a", "b"])]))]
    tensors = [("w", [4, 2], 0, f32), ("q", [32], 8, q8_0), ("h", [2], 1, struct.pack("<2e", 1, -1))]
    good = gguf(meta, tensors)
    write("gguf", "tensors_meta", good)
    write("gguf", "empty_v2", gguf([], version=2))
    write("gguf", "spm_tokenizer", gguf(spm_tokenizer_kv("llama")))
    write("gguf", "gemma_tokenizer", gguf(spm_tokenizer_kv("gemma3")))
    write("gguf", "gpt2_tokenizer", gguf(gpt2_tokenizer_kv("qwen2")))
    write("gguf", "truncated", good[:len(good) - 40])
    write("gguf", "bad_type", gguf(meta[:1], [("w", [4, 2], 99, f32)]))
    write("gguf", "huge_count", struct.pack("<IIQQ", 0x46554747, 3, 0, 1 << 60))
    write("gguf", "dims_overflow", gguf([], [("w", [1 << 40, 1 << 40], 0, f32)]))


# ---- tokenizers: first byte picks the tokenizer (see tests/fuzz/fuzz_tokenizer.cpp)

def make_tokenizer():
    texts = ["Hello world! The NPU streams weights.", "na\u00efve caf\u00e9 \u4f60\u597d \U0001F600 \u0627\u0644",
             "  leading\tand\nnewlines  ", "[CLS] <s> </s> <|endoftext|> [MASK]", "MKTAYIAKQRQISFVKSHFSRQ"]
    for mode in range(6):
        write("tokenizer", "text_%d" % mode, bytes([mode]) + texts[mode % len(texts)].encode())
    write("tokenizer", "invalid_utf8", b"\x01abc\xc3\x28\xff\xe2\x82")
    write("tokenizer", "ids", b"\x06" + struct.pack("<6i", 0, 1, 2, 100, -5, 1 << 30))
    wordpiece = {"version": "1.0", "added_tokens": [{"id": 0, "content": "[UNK]", "special": True}],
                 "normalizer": {"type": "BertNormalizer", "lowercase": True, "strip_accents": None,
                                "clean_text": True, "handle_chinese_chars": True},
                 "pre_tokenizer": {"type": "BertPreTokenizer"},
                 "post_processor": None, "decoder": {"type": "WordPiece", "prefix": "##"},
                 "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                           "max_input_chars_per_word": 100,
                           "vocab": {"[UNK]": 0, "hello": 1, "world": 2, "##s": 3, "fuzz": 4, ",": 5}}}
    write("tokenizer", "json_wordpiece", b"\x07" + json.dumps(wordpiece).encode())
    bpe = {"version": "1.0", "added_tokens": [],
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                     "vocab": {"H": 0, "e": 1, "l": 2, "o": 3, "He": 4, "ll": 5, "Hell": 6, "Hello": 7},
                     "merges": ["H e", "l l", "He ll", "Hell o"]}}
    write("tokenizer", "json_bpe", b"\x07" + json.dumps(bpe).encode())
    unigram = {"version": "1.0", "added_tokens": [],
               "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
               "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
               "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
               "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": False,
                         "vocab": [["<unk>", 0.0], ["\u2581hello", -1.0], ["\u2581", -2.0], ["h", -3.0], ["o", -3.0]]}}
    write("tokenizer", "json_unigram", b"\x07" + json.dumps(unigram).encode())
    write("tokenizer", "json_broken", b"\x07" + json.dumps(wordpiece).encode()[:150])


# ---- audio: decode_audio on whole files

def wav(rate, channels, frames, width=2):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        samples = []
        for i in range(frames):
            v = int(0.5 * math.sin(2 * math.pi * 440 * i / rate) * (2 ** (8 * width - 1) - 1))
            samples += [v] * channels
        fmt = {1: "b", 2: "h", 4: "i"}[width]
        data = struct.pack("<%d%s" % (len(samples), fmt), *samples)
        if width == 1:
            data = bytes((b + 128) & 0xFF for b in data)
        w.writeframes(data)
    return buf.getvalue()


def make_audio():
    write("audio", "mono16k.wav", wav(16000, 1, 400))
    write("audio", "stereo44k.wav", wav(44100, 2, 300))
    write("audio", "u8_8k.wav", wav(8000, 1, 200, width=1))
    write("audio", "truncated.wav", wav(16000, 1, 400)[:60])
    for name in ("speech.mp3", "speech.ogg", "speech.flac", "speech.opus"):
        with open(os.path.join(FIXTURES, "audio", name), "rb") as f:
            write("audio", "head_" + name, f.read(3000))
    with open(os.path.join(FIXTURES, "audio", "video_only.mkv"), "rb") as f:
        write("audio", "video_only.mkv", f.read())
    write("audio", "not_audio.txt", "this is not audio at all\n" * 4)


# ---- OpenAI requests: first byte picks the endpoint (see tests/fuzz/fuzz_openai_requests.cpp)

def make_openai_requests():
    t = "openai_requests"
    write(t, "emb_text", b"\x00" + json.dumps({"model": "m", "input": "hello"}).encode())
    write(t, "emb_list", b"\x00" + json.dumps({"model": "m", "input": ["a", "b"], "encoding_format": "base64",
                                              "dimensions": 8}).encode())
    write(t, "emb_ids", b"\x00" + json.dumps({"model": "m", "input": [[1, 2], [18446744073709551615]]}).encode())
    write(t, "emb_bad", b"\x00" + b'{"model": "m", "input": [1, "a"], "dimensions": -1')
    write(t, "chat", b"\x01" + json.dumps({
        "model": "m", "messages": [{"role": "developer", "content": "be brief"},
                                   {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": -3, "stop": ["\n", "END"], "logprobs": True,
        "top_logprobs": 2, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 5}).encode())
    write(t, "chat_bad", b"\x01" + json.dumps({"model": "m", "messages": [{"role": 1}], "temperature": "x",
                                              "n": 2}).encode())
    write(t, "completion", b"\x02" + json.dumps({"model": "m", "prompt": [[1, 2, 3]], "logprobs": 3, "echo": False,
                                                "best_of": 1, "presence_penalty": -2, "min_p": 0.1}).encode())
    write(t, "completion_nan", b"\x02" + b'{"model": "m", "prompt": "x", "temperature": NaN, "max_tokens": 1e400}')
    write(t, "audio", b"\x03" + b"\xff".join([b"file=RIFF....WAVEfmt ", b"model=whisper-base", b"language=en",
                                             b"response_format=verbose_json", b"temperature=0.2",
                                             b"timestamp_granularities[]=segment", b"prompt=hi"]))
    write(t, "audio_translate", b"\x04" + b"\xff".join([b"file=xyz", b"model=w", b"temperature=1e999",
                                                       b"response_format=srt"]))
    write(t, "audio_no_file", b"\x03model=w")
    write(t, "not_multipart", b"\x05file=x\xffmodel=w")


def make_ollama_requests():
    t = "ollama_requests"
    write(t, "generate", b"\x00" + json.dumps({
        "model": "gemma3-270m:latest", "prompt": "Why is the sky blue?", "system": "short", "stream": False,
        "context": [1, 2, 3], "options": {"temperature": 0.2, "top_k": 10, "top_p": 0.5, "num_predict": 16,
                                          "seed": 42, "stop": ["\n"], "repeat_penalty": 1.1}}).encode())
    write(t, "generate_load", b"\x00" + b'{"model": "m"}')
    write(t, "chat", b"\x01" + json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                          "options": {"num_predict": -1, "min_p": 0.05}}).encode())
    write(t, "embed", b"\x02" + json.dumps({"model": "m", "input": ["a", "b"], "truncate": False,
                                           "dimensions": 16}).encode())
    write(t, "embeddings", b"\x03" + json.dumps({"model": "m", "prompt": "a"}).encode())
    write(t, "show", b"\x04" + json.dumps({"model": "m:7b", "verbose": True}).encode())
    write(t, "bad", b"\x01" + b'{"model": "../etc", "messages": "x", "options": {"temperature": -1}')


if __name__ == "__main__":
    make_safetensors()
    make_gguf()
    make_tokenizer()
    make_audio()
    make_openai_requests()
    make_ollama_requests()
