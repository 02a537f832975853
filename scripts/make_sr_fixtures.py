#!/usr/bin/env python3
"""Random-init ESPCN and EDSR fixtures for tests/models/test_upscaler_torch.cpp.

The modules follow the papers' structure with the reference repositories' parameter names, so the
state dicts load as real checkpoints would:
  ESPCN (Shi et al. 2016): first_part = conv5x5 -> tanh -> conv3x3 -> tanh, last_part = conv3x3
        -> pixel shuffle (the layout of the common PyTorch port, with 3 colour channels).
  EDSR (Lim et al. 2017; sanghyun-son/EDSR-PyTorch model/edsr.py): sub_mean, head, body (residual
        blocks conv-ReLU-conv scaled by res_scale, then a conv), + skip, tail (upsampler conv +
        pixel shuffle, x4 as two x2 stages; then a conv), add_mean.
Weights are drawn at a larger scale than PyTorch's default init so that every layer matters.

Writes tests/fixtures/sr/: <name>.pt (or .safetensors), <name>.in.f32 (input [3, H, W]),
<name>.out.f32 (the PyTorch output at f32) and sr.json describing them.

    /work/venv/bin/python scripts/make_sr_fixtures.py [--out tests/fixtures/sr]
    /work/venv/bin/python scripts/make_sr_fixtures.py --onnx-edsr-x2 DIR   # full-size, for bench/
"""
import argparse
import json
import math
import os

import numpy as np
import torch
from torch import nn

RGB_MEAN = (0.4488, 0.4371, 0.4040)  # DIV2K mean, EDSR-PyTorch's default


def conv(cin, cout, k):
    return nn.Conv2d(cin, cout, k, padding=k // 2, bias=True)


class MeanShift(nn.Conv2d):
    """A fixed 1x1 conv adding (sign = 1) or removing (sign = -1) the dataset mean."""

    def __init__(self, rgb_range, sign):
        super().__init__(3, 3, kernel_size=1)
        with torch.no_grad():
            self.weight.copy_(torch.eye(3).reshape(3, 3, 1, 1))
            self.bias.copy_(sign * rgb_range * torch.tensor(RGB_MEAN))
        for p in self.parameters():
            p.requires_grad = False


class ResBlock(nn.Module):
    def __init__(self, feats, k, res_scale):
        super().__init__()
        self.body = nn.Sequential(conv(feats, feats, k), nn.ReLU(True), conv(feats, feats, k))
        self.res_scale = res_scale

    def forward(self, x):
        return self.body(x).mul(self.res_scale) + x


class Upsampler(nn.Sequential):
    def __init__(self, scale, feats):
        layers = []
        if scale in (2, 4, 8):
            for _ in range(int(math.log2(scale))):
                layers += [conv(feats, 4 * feats, 3), nn.PixelShuffle(2)]
        elif scale == 3:
            layers += [conv(feats, 9 * feats, 3), nn.PixelShuffle(3)]
        else:
            raise ValueError(f"scale {scale}")
        super().__init__(*layers)


class EDSR(nn.Module):
    def __init__(self, scale, n_resblocks, n_feats, res_scale, rgb_range=255, k=3):
        super().__init__()
        self.sub_mean = MeanShift(rgb_range, -1)
        self.add_mean = MeanShift(rgb_range, 1)
        self.head = nn.Sequential(conv(3, n_feats, k))
        self.body = nn.Sequential(*[ResBlock(n_feats, k, res_scale) for _ in range(n_resblocks)],
                                  conv(n_feats, n_feats, k))
        self.tail = nn.Sequential(Upsampler(scale, n_feats), conv(n_feats, 3, k))

    def forward(self, x):
        x = self.head(self.sub_mean(x))
        x = self.body(x) + x
        return self.add_mean(self.tail(x))


class ESPCN(nn.Module):
    def __init__(self, scale, feats=64, mid=32, colors=3):
        super().__init__()
        self.first_part = nn.Sequential(nn.Conv2d(colors, feats, 5, padding=2), nn.Tanh(),
                                        nn.Conv2d(feats, mid, 3, padding=1), nn.Tanh())
        self.last_part = nn.Sequential(nn.Conv2d(mid, colors * scale ** 2, 3, padding=1),
                                       nn.PixelShuffle(scale))

    def forward(self, x):
        return self.last_part(self.first_part(x))


def randomize(model, gain):
    """Uniform weights with a per-layer scale keeping activations O(1); MeanShift stays exact."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d) and not isinstance(m, MeanShift):
                fan_in = m.weight.shape[1] * m.weight.shape[2] * m.weight.shape[3]
                m.weight.uniform_(-gain / math.sqrt(fan_in), gain / math.sqrt(fan_in))
                m.bias.uniform_(-0.1, 0.1)


def write_case(out_dir, name, model, x, fmt, meta, cases):
    with torch.no_grad():
        y = model(x.unsqueeze(0))[0]
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if fmt == "pt":
        torch.save(sd, os.path.join(out_dir, name + ".pt"))
        weights = name + ".pt"
    else:
        from safetensors.torch import save_file
        save_file(sd, os.path.join(out_dir, name + ".safetensors"),
                  metadata={k: str(v) for k, v in meta.items()})
        weights = name + ".safetensors"
    x.numpy().astype("<f4").tofile(os.path.join(out_dir, name + ".in.f32"))
    y.numpy().astype("<f4").tofile(os.path.join(out_dir, name + ".out.f32"))
    cases.append({"name": name, "weights": weights, "in_shape": list(x.shape),
                  "out_shape": list(y.shape), **meta})


def make_fixtures(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(20261130)
    cases = []
    for scale in (2, 3, 4):
        m = ESPCN(scale, feats=12, mid=8).eval()
        randomize(m, 1.5)
        write_case(out_dir, f"espcn_x{scale}", m, torch.rand(3, 11, 9), "pt",
                   {"arch": "espcn", "scale": scale, "range": 1}, cases)
    for scale, fmt, res_scale in ((2, "pt", 1.0), (3, "pt", 0.1), (4, "safetensors", 0.1)):
        m = EDSR(scale, n_resblocks=2, n_feats=8, res_scale=res_scale).eval()
        randomize(m, 1.0)
        meta = {"arch": "edsr", "scale": scale, "range": 255, "res_scale": res_scale}
        write_case(out_dir, f"edsr_x{scale}", m, 255 * torch.rand(3, 10, 13), fmt, meta, cases)
        if fmt == "pt" and res_scale != 1.0:  # the loader reads res_scale from a same-stem JSON
            with open(os.path.join(out_dir, f"edsr_x{scale}.json"), "w") as f:
                json.dump({"res_scale": res_scale}, f)
    with open(os.path.join(out_dir, "sr.json"), "w") as f:
        json.dump({"generator": "scripts/make_sr_fixtures.py", "torch": torch.__version__,
                   "cases": cases}, f, indent=1)


def export_edsr_x2(out_dir, size):
    """Full-size EDSR baseline x2 (16 blocks, 64 features, res_scale 1), random init: the state
    dict for the engine and the same network as ONNX for ONNX Runtime (bench/bench_sr_vs_ort.py)."""
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(7)
    m = EDSR(2, n_resblocks=16, n_feats=64, res_scale=1.0).eval()
    randomize(m, 1.0)
    torch.save({k: v.contiguous() for k, v in m.state_dict().items()}, os.path.join(out_dir, "edsr_x2.pt"))
    x = 255 * torch.rand(1, 3, size, size)
    torch.onnx.export(m, (x,), os.path.join(out_dir, "edsr_x2.onnx"), input_names=["x"],
                      output_names=["y"], opset_version=17, dynamo=False)
    np.asarray(x[0].numpy(), dtype="<f4").tofile(os.path.join(out_dir, "input.f32"))
    with torch.no_grad():
        np.asarray(m(x)[0].numpy(), dtype="<f4").tofile(os.path.join(out_dir, "torch_out.f32"))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "sr"))
    ap.add_argument("--onnx-edsr-x2", metavar="DIR", help="write the full-size benchmark model instead")
    ap.add_argument("--size", type=int, default=256)
    a = ap.parse_args()
    if a.onnx_edsr_x2:
        export_edsr_x2(a.onnx_edsr_x2, a.size)
    else:
        make_fixtures(a.out)
