"""Rewrites a GGUF with every tensor dequantized to f32 (metadata copied), so that a checkpoint
whose block types the engine's loader refuses (e.g. the model store's Gemma 3 270M, q5_0 attn_q)
can go through experiments/npu_kv4_real_weights.cpp. Not a test; needs the `gguf` package.
Usage: python experiments/gguf_dequantize_f32.py IN.gguf OUT.gguf
"""
import sys

import numpy as np
import gguf
from gguf.gguf_reader import GGUFReader


def _get(self, offset, dtype, count=1, override_order=None):
    # The package's reader calls ndarray.newbyteorder, which numpy 2 removed; little-endian files
    # need no byte swap.
    count = int(count)
    itemsize = int(np.empty([], dtype=dtype).itemsize)
    return self.data[offset:offset + itemsize * count].view(dtype=dtype)[:count]


GGUFReader._get = _get


def field_value(f):
    t = f.types[0]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[1] if len(f.types) > 1 else None
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    return f.parts[f.data[0]][0].item()


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    arch = field_value(r.fields["general.architecture"])
    w = gguf.GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.alignment"):
            continue
        t = f.types[0]
        v = field_value(f)
        if t == gguf.GGUFValueType.ARRAY:
            w.add_array(name, v)  # element type from the values (ints int32, floats f32, strings)
        else:
            w.add_key_value(name, v, t)
    for t in r.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        x = x.reshape([int(d) for d in reversed(t.shape.tolist())])
        w.add_tensor(t.name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
