#!/usr/bin/env python3
"""End-to-end references for the conformer ASR models: the tiny random-weight archives of
tests/fixtures/conformer/archives (written by make_conformer_archives.py) transcribed by their own
upstream packages, on committed audio clips. The C++ test (tests/pipeline/test_conformer_transcribe.cpp)
must produce the same tokens / text from the same files.

  nemo    NeMo 3.0.0 (/work/nemovenv): ASRModel.restore_from(.nemo).transcribe(..., return_hypotheses=True)
          -> token ids (y_sequence) and text, greedy decoding as configured in the archive.
  gigaam  gigaam 0.1.0 (/work/gigaamvenv): GigaAMASR(cfg) with the checkpoint's state dict, as
          gigaam.load_model builds it -> model.transcribe(wav) text.

Run both halves (each in its venv):
  /work/nemovenv/bin/python scripts/make_conformer_e2e_fixtures.py nemo
  /work/gigaamvenv/bin/python scripts/make_conformer_e2e_fixtures.py gigaam
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHIVES = os.path.join(ROOT, "tests/fixtures/conformer/archives")
OUT = os.path.join(ROOT, "tests/fixtures/conformer/e2e/reference.json")
CLIPS = ["speech16k.wav"]


def update(section, data):
    ref = json.load(open(OUT)) if os.path.exists(OUT) else {}
    ref[section] = data
    with open(OUT, "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")


def nemo():
    import soundfile
    import torch
    from nemo.collections.asr.models import ASRModel
    torch.manual_seed(0)
    data = {}
    for name in ["parakeet_ctc_bpe.nemo", "parakeet_tdt_bpe.nemo", "conformer_ctc_char.nemo"]:
        model = ASRModel.restore_from(os.path.join(ARCHIVES, name), map_location="cpu")
        model.eval()
        model.preprocessor.featurizer.dither = 0.0
        for clip in CLIPS:
            # The model's own forward + decoding (transcribe() needs dataset configs the tiny
            # archives do not carry): preprocessor -> encoder -> greedy decoding, batch 1.
            audio, sr = soundfile.read(os.path.join(ROOT, "tests/fixtures/audio", clip), dtype="float32")
            assert sr == 16000 and audio.ndim == 1
            sig = torch.tensor(audio)[None]
            length = torch.tensor([sig.shape[1]])
            with torch.no_grad():
                if hasattr(model, "joint"):  # RNN-T / TDT
                    enc, enc_len = model.forward(input_signal=sig, input_signal_length=length)
                    hyps = model.decoding.rnnt_decoder_predictions_tensor(
                        encoder_output=enc, encoded_lengths=enc_len, return_hypotheses=True)
                else:
                    log_probs, enc_len, _ = model.forward(input_signal=sig, input_signal_length=length)
                    hyps = model.decoding.ctc_decoder_predictions_tensor(
                        log_probs, decoder_lengths=enc_len, return_hypotheses=True)
            h = hyps[0][0] if isinstance(hyps, tuple) else hyps[0]
            ids = h.y_sequence.tolist() if hasattr(h.y_sequence, "tolist") else list(h.y_sequence)
            data[name + ":" + clip] = {"tokens": [int(i) for i in ids], "text": h.text}
            print(name, clip, len(ids), "tokens:", repr(h.text[:60]))
    update("nemo 3.0.0", data)


def gigaam():
    import torch
    from gigaam.model import GigaAMASR
    data = {}
    for name in ["gigaam_ctc.ckpt", "gigaam_rnnt.ckpt"]:
        ckpt = torch.load(os.path.join(ARCHIVES, name), map_location="cpu", weights_only=False)
        cfg = ckpt["cfg"]
        tok = os.path.join(ARCHIVES, name.replace(".ckpt", "_tokenizer.model"))
        if os.path.exists(tok):
            cfg.decoding.model_path = tok
        model = GigaAMASR(cfg)
        model.load_state_dict(ckpt["state_dict"], strict=False)
        model.eval()
        for clip in CLIPS:
            path = os.path.join(ROOT, "tests/fixtures/audio", clip)
            with torch.no_grad():
                text = model.transcribe(path)
            data[name + ":" + clip] = {"text": text}
            print(name, clip, repr(text[:60]))
    update("gigaam 0.1.0", data)

    # A loader-level check with every parameter random (batch-norm statistics too) and a
    # 31-tap conv module, as GigaAM v2 has: the encoder output from load_conformer(ckpt) must
    # match gigaam's on fixed features (the tiny archives above keep default-initialised norms).
    from omegaconf import OmegaConf
    labels = [" "] + [chr(c) for c in range(0x430, 0x450)]  # space + the 32 lowercase Cyrillic letters
    enc = {"_target_": "gigaam.encoder.ConformerEncoder", "feat_in": 64, "n_layers": 2, "d_model": 32,
           "subsampling_factor": 4, "ff_expansion_factor": 4, "self_attention_model": "rotary",
           "pos_emb_max_len": 5000, "n_heads": 4, "conv_kernel_size": 31, "flash_attn": False}
    cfg = OmegaConf.create({
        "model_name": "v2_ctc", "sample_rate": 16000,
        "preprocessor": {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": 16000, "features": 64},
        "encoder": enc, "head": {"_target_": "gigaam.decoder.CTCHead", "feat_in": 32, "num_classes": 34},
        "decoding": {"_target_": "gigaam.decoding.CTCGreedyDecoding", "vocabulary": labels}})
    torch.manual_seed(7)
    model = GigaAMASR(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn_like(b) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand_like(b) + 0.5)
    out = os.path.join(os.path.dirname(OUT), "gigaam_ctc_random.ckpt")
    torch.save({"cfg": cfg, "state_dict": model.state_dict()}, out)
    features = torch.randn(1, 64, 203, generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        encoded, _ = model.encoder(features, torch.tensor([203]))
    update("gigaam 0.1.0 random encoder", {
        "features": features[0].reshape(-1).tolist(), "frames": 203,
        "encoded": encoded[0].transpose(0, 1).reshape(-1).tolist(), "encoded_frames": int(encoded.shape[2])})
    print("gigaam_ctc_random.ckpt", tuple(encoded.shape))


if __name__ == "__main__":
    {"nemo": nemo, "gigaam": gigaam}[sys.argv[1]]()
