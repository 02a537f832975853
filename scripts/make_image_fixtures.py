#!/usr/bin/env python3
"""Writes tests/fixtures/images: small test images in every format the image frontend decodes,
the RGB that Pillow decodes from each (what `Image.open(f).convert("RGB")` gives), and the
pixel_values of transformers' PIL-backend image processors (ViT, BiT/DINOv2, ConvNeXt,
EfficientNet) for some of them, as raw little-endian float16 with a JSON index (images.json).

Pinned (scripts/requirements.txt): pillow 12.0.0, numpy 1.26.4, transformers 5.24.0.
The photo is /usr/share/darknet/data/dog.jpg from Debian's `darknet` package
(`apt-get download darknet`; dpkg-deb -x), downscaled to 96x72. Processor sizes are small
(48 px) to keep the fixtures small; the resampling code paths are the same as at 224.

  python scripts/make_image_fixtures.py [path/to/dog.jpg]
"""
import io
import json
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import PIL
from PIL import Image
import transformers
from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil
from transformers.models.bit.image_processing_pil_bit import BitImageProcessorPil
from transformers.models.convnext.image_processing_pil_convnext import ConvNextImageProcessorPil
from transformers.models.efficientnet.image_processing_pil_efficientnet import EfficientNetImageProcessorPil

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "images"
DOG = Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/darknet/data/dog.jpg")
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def synthetic_rgb(w, h):
    """Gradients plus a checkerboard and a hard diagonal: sharp edges stress the resampler."""
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1)).astype(np.uint8)
    g = (y * 255 // max(h - 1, 1)).astype(np.uint8)
    b = np.where(((x // 5) + (y // 5)) % 2 == 0, 250, 10).astype(np.uint8)
    b[x > y + w // 3] = 128
    return np.stack([r, g, b], axis=-1)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png16_rgb(pixels):
    """A 16-bit RGB PNG written by hand (Pillow cannot save one)."""
    h, w, _ = pixels.shape
    raw = b"".join(b"\0" + pixels[i].astype(">u2").tobytes() for i in range(h))
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
            + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b""))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    photo = Image.open(DOG).convert("RGB").resize((96, 72), Image.LANCZOS)
    files = {}

    def save(name, img, **kw):
        buf = io.BytesIO()
        img.save(buf, **kw)
        files[name] = buf.getvalue()

    save("photo.jpg", photo, format="JPEG", quality=90)
    save("photo_progressive.jpg", photo, format="JPEG", quality=85, progressive=True)
    save("photo_gray.jpg", photo.convert("L"), format="JPEG", quality=90)
    save("photo.webp", photo, format="WEBP", quality=80)
    save("photo_lossless.webp", photo, format="WEBP", lossless=True)
    grad = Image.fromarray(synthetic_rgb(97, 61))
    save("grad.png", grad, format="PNG")
    rgba = np.dstack([synthetic_rgb(40, 30), (np.arange(40 * 30) * 7 % 256).reshape(30, 40).astype(np.uint8)])
    save("rgba.png", Image.fromarray(rgba, "RGBA"), format="PNG")
    save("rgba.webp", Image.fromarray(rgba, "RGBA"), format="WEBP", lossless=True)
    save("gray.png", Image.fromarray(synthetic_rgb(33, 47)[..., 0], "L"), format="PNG")
    pal = grad.crop((0, 0, 50, 40)).quantize(16)
    save("palette.png", pal, format="PNG", transparency=3)
    g16 = (np.mgrid[0:23, 0:37][1] * 1800).astype(np.uint16)  # spans 0..64800: above and below 255
    save("gray16.png", Image.fromarray(g16, "I;16"), format="PNG")
    files["rgb16.png"] = png16_rgb((synthetic_rgb(21, 13).astype(np.uint16) * 257 + 3))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW to display; HF processors do not apply it
    save("exif_rotated.jpg", Image.fromarray(synthetic_rgb(16, 8)), format="JPEG", quality=95, exif=exif.tobytes())
    save("cmyk.jpg", photo.crop((0, 0, 16, 16)).convert("CMYK"), format="JPEG")

    index = {"versions": {"pillow": PIL.__version__, "numpy": np.__version__, "transformers": transformers.__version__},
             "decoded": {}, "processed": []}
    for name, data in files.items():
        (OUT / name).write_bytes(data)
        if name == "cmyk.jpg":
            continue  # the frontend refuses CMYK: nothing to compare
        img = Image.open(io.BytesIO(data))
        rgb = np.asarray(img.convert("RGB"))
        (OUT / (name + ".rgb")).write_bytes(rgb.tobytes())
        index["decoded"][name] = {"width": img.width, "height": img.height, "mode": img.mode}

    processors = {
        "vit": (ViTImageProcessorPil, {"size": {"height": 48, "width": 48}}),
        # facebook/dinov2-small preprocessor_config.json, sizes scaled down (256/224 -> 55/48)
        "dinov2": (BitImageProcessorPil, {"size": {"shortest_edge": 55}, "crop_size": {"height": 48, "width": 48},
                                          "resample": 3, "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD,
                                          "do_center_crop": True, "do_convert_rgb": True}),
        "convnext": (ConvNextImageProcessorPil, {"size": {"shortest_edge": 48}, "crop_pct": 0.875}),
        "efficientnet": (EfficientNetImageProcessorPil, {"size": {"height": 50, "width": 50}}),
        "vit_upscale": (ViTImageProcessorPil, {"size": {"height": 64, "width": 56}}),
        "vit_nearest": (ViTImageProcessorPil, {"size": {"height": 14, "width": 20}, "resample": 0}),
        "vit_lanczos": (ViTImageProcessorPil, {"size": {"height": 14, "width": 20}, "resample": 1}),
    }
    cases = [("photo.jpg", "vit"), ("photo.jpg", "dinov2"), ("photo.jpg", "convnext"), ("photo.jpg", "efficientnet"),
             ("grad.png", "vit"), ("grad.png", "dinov2"), ("rgba.png", "dinov2"), ("gray.png", "vit_upscale"),
             ("grad.png", "vit_nearest"), ("photo.jpg", "vit_lanczos")]
    for name, proc in cases:
        cls, cfg = processors[proc]
        p = cls(**cfg)
        img = Image.open(OUT / name)
        if not cfg.get("do_convert_rgb"):
            img = img.convert("RGB")  # processors without do_convert_rgb need 3 channels
        pv = p(images=img, return_tensors="np")["pixel_values"].astype(np.float32)
        out = f"{Path(name).stem}.{proc}.f16"
        (OUT / out).write_bytes(pv.astype(np.float16).tobytes())
        config = {"image_processor_type": cls.__name__.removesuffix("Pil"), **cfg}
        index["processed"].append({"image": name, "processor": proc, "output": out, "shape": list(pv.shape),
                                   "config": config})
    (OUT / "images.json").write_text(json.dumps(index, indent=1) + "\n")
    total = sum(f.stat().st_size for f in OUT.iterdir())
    print(f"wrote {len(list(OUT.iterdir()))} files, {total} bytes to {OUT}")


if __name__ == "__main__":
    main()
