#!/usr/bin/env python3
"""Writes tests/fixtures/tfjs/tiny/: a TF.js layers model written by hand (no TensorFlow) and its
expected output computed here with numpy in TF's NHWC conventions, independently of the C++ code.

Graph: LR [H, W, 3] -> c1 Conv2D 3x3 same relu (float32) -> concat [c1, LR] -> c2 Conv2D 2x2 same
(even kernel: TF pads 0 before, 1 after) with a uint8-quantized kernel and a float16 bias ->
PixelShuffle2x (UpscalerJS's custom layer, tf.depthToSpace NHWC) -> Add with UpSampling2D(LR, 2).
Run: /work/venv/bin/python scripts/make_tfjs_fixture.py  (numpy only)
"""
import json
import pathlib

import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tfjs" / "tiny"
rng = np.random.default_rng(20261130)


def conv_same(x, k, b):  # x [H, W, Ci], k [Kh, Kw, Ci, Co], TF 'same' padding, stride 1
    kh, kw = k.shape[:2]
    th, tw = kh - 1, kw - 1
    xp = np.pad(x, ((th // 2, th - th // 2), (tw // 2, tw - tw // 2), (0, 0)))
    h, w = x.shape[:2]
    y = np.zeros((h, w, k.shape[3]))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("hwc,co->hwo", xp[i:i + h, j:j + w, :], k[i, j])
    return y + b


def depth_to_space(x, r):  # TF NHWC: out[h r + i, w r + j, c] = in[h, w, (i r + j) C + c]
    h, w, cr = x.shape
    c = cr // (r * r)
    return x.reshape(h, w, r, r, c).transpose(0, 2, 1, 3, 4).reshape(h * r, w * r, c)


def conv_layer(name, inbound, filters, k, padding, activation):
    return {"class_name": "Conv2D", "name": name, "inbound_nodes": [[[n, 0, 0, {}] for n in inbound]],
            "config": {"name": name, "filters": filters, "kernel_size": [k, k], "strides": [1, 1],
                       "padding": padding, "data_format": "channels_last", "dilation_rate": [1, 1],
                       "groups": 1, "activation": activation, "use_bias": True}}


def main():
    H, W = 5, 6
    x = rng.uniform(0, 1, (H, W, 3))
    k1 = rng.normal(0, 0.3, (3, 3, 3, 8)).astype(np.float32)
    b1 = rng.normal(0, 0.1, (8,)).astype(np.float32)
    # c2: kernel stored as uint8 with scale/min (tfjs quantization), bias as float16.
    q2 = rng.integers(0, 256, (2, 2, 11, 12)).astype(np.uint8)
    scale2, min2 = 0.0025, -0.3
    k2 = q2.astype(np.float64) * np.float32(scale2) + np.float32(min2)
    b2h = rng.normal(0, 0.1, (12,)).astype(np.float16)

    c1 = np.maximum(conv_same(x, k1.astype(np.float64), b1.astype(np.float64)), 0)
    cat = np.concatenate([c1, x], axis=2)
    c2 = conv_same(cat, k2, b2h.astype(np.float64))
    ps = depth_to_space(c2, 2)
    up = x.repeat(2, axis=0).repeat(2, axis=1)
    y = ps + up

    layers = [
        {"class_name": "InputLayer", "name": "LR", "inbound_nodes": [],
         "config": {"batch_input_shape": [None, None, None, 3], "dtype": "float32", "name": "LR"}},
        conv_layer("c1", ["LR"], 8, 3, "same", "relu"),
        {"class_name": "Concatenate", "name": "cat", "inbound_nodes": [[["c1", 0, 0, {}], ["LR", 0, 0, {}]]],
         "config": {"name": "cat", "axis": 3}},
        conv_layer("c2", ["cat"], 12, 2, "same", "linear"),
        {"class_name": "PixelShuffle2x", "name": "ps", "inbound_nodes": [[["c2", 0, 0, {}]]], "config": {}},
        {"class_name": "UpSampling2D", "name": "up", "inbound_nodes": [[["LR", 0, 0, {}]]],
         "config": {"name": "up", "size": [2, 2], "data_format": "channels_last", "interpolation": "nearest"}},
        {"class_name": "Add", "name": "SR", "inbound_nodes": [[["ps", 0, 0, {}], ["up", 0, 0, {}]]],
         "config": {"name": "SR"}},
    ]
    weights = [
        {"name": "c1/kernel", "shape": list(k1.shape), "dtype": "float32"},
        {"name": "c1/bias", "shape": [8], "dtype": "float32"},
        {"name": "c2/kernel", "shape": list(q2.shape), "dtype": "float32",
         "quantization": {"dtype": "uint8", "scale": scale2, "min": min2, "original_dtype": "float32"}},
        {"name": "c2/bias", "shape": [12], "dtype": "float32",
         "quantization": {"dtype": "float16", "original_dtype": "float32"}},
    ]
    shard = k1.tobytes() + b1.tobytes() + q2.tobytes() + b2h.tobytes()
    model = {"format": "layers-model", "generatedBy": "scripts/make_tfjs_fixture.py",
             "convertedBy": None,
             "modelTopology": {"keras_version": "2.10.0", "backend": "tensorflow", "model_config": {
                 "class_name": "Functional", "config": {"name": "tiny", "layers": layers,
                                                        "input_layers": [["LR", 0, 0]],
                                                        "output_layers": [["SR", 0, 0]]}}},
             "weightsManifest": [{"paths": ["group1-shard1of1.bin"], "weights": weights}]}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "model.json").write_text(json.dumps(model, indent=1) + "\n")
    (OUT / "group1-shard1of1.bin").write_bytes(shard)
    expected = {"input_hwc": x.round(8).ravel().tolist(), "height": H, "width": W,
                "output_hwc": None, "c2_kernel_first": float(k2.ravel()[0]), "c2_q_first": int(q2.ravel()[0]),
                "c2_bias": b2h.astype(np.float64).tolist(), "c1_bias": b1.astype(np.float64).tolist()}
    # Recompute with the rounded input the test feeds, so both sides see the same numbers.
    x = np.array(expected["input_hwc"]).reshape(H, W, 3)
    c1 = np.maximum(conv_same(x, k1.astype(np.float64), b1.astype(np.float64)), 0)
    c2 = conv_same(np.concatenate([c1, x], axis=2), k2, b2h.astype(np.float64))
    y = depth_to_space(c2, 2) + x.repeat(2, axis=0).repeat(2, axis=1)
    expected["output_hwc"] = y.ravel().tolist()
    (OUT / "expected.json").write_text(json.dumps(expected) + "\n")


if __name__ == "__main__":
    main()
