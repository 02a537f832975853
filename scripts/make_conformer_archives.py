#!/usr/bin/env python3
"""Tiny conformer checkpoints in their published formats, for tests/models/test_conformer_load.cpp
and tests/weights/test_nemo_archive.cpp.

.nemo archives: written by NeMo itself (nemo_toolkit[asr]==3.0.0, ModelPT.save_to) from tiny,
randomly initialised FastConformer models (FastConformer CTC with a SentencePiece BPE tokenizer,
CTC with characters, TDT with BPE). Run with a venv holding NeMo (default /work/nemovenv).
GigaAM checkpoints: written as gigaam 0.1.0's checkpoints are ({"cfg": OmegaConf config,
"state_dict": ...} through torch.save) from a tiny GigaAMASR built by gigaam itself, run by
$GIGAAM_PYTHON (default /work/gigaamvenv/bin/python).

Also writes reference.json: each model's config values and vocabulary as upstream sees them.
Usage: /work/nemovenv/bin/python scripts/make_conformer_archives.py
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "conformer", "archives")

TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "a tiny conformer model for the engine tests",
    "speech recognition with transducers and connectionist temporal classification",
] * 20


def preprocessor(features):
    return {
        "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
        "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
        "window": "hann", "features": features, "n_fft": 512, "log": True, "frame_splicing": 1,
        "dither": 1e-5, "pad_to": 0, "pad_value": 0.0,
    }


def encoder(features, **over):
    enc = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder",
        "feat_in": features, "feat_out": -1, "n_layers": 2, "d_model": 32, "use_bias": True,
        "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 16,
        "causal_downsampling": False, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
        "n_heads": 4, "att_context_size": [-1, -1], "att_context_style": "regular", "xscaling": True,
        "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9, "conv_norm_type": "batch_norm",
        "conv_context_size": None, "dropout": 0.0, "dropout_pre_encoder": 0.0, "dropout_emb": 0.0,
        "dropout_att": 0.0,
    }
    enc.update(over)
    return enc


def make_tokenizer(tmp, vocab_size):
    import sentencepiece as spm

    d = os.path.join(tmp, "tok")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "text.txt"), "w") as f:
        f.write("\n".join(TEXT))
    spm.SentencePieceTrainer.train(
        input=os.path.join(d, "text.txt"), model_prefix=os.path.join(d, "tokenizer"), vocab_size=vocab_size,
        model_type="bpe", character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0)
    with open(os.path.join(d, "vocab.txt"), "w") as f:  # NeMo's tokenizer dirs carry both
        for line in open(os.path.join(d, "tokenizer.vocab")):
            f.write(line.split("\t")[0] + "\n")
    return d


def nemo_models(tmp):
    import torch
    from omegaconf import OmegaConf
    from nemo.collections.asr.models import EncDecCTCModel, EncDecCTCModelBPE, EncDecRNNTBPEModel

    torch.manual_seed(0)
    tok = make_tokenizer(tmp, 40)
    ref = {}

    def save(model, name):
        model.eval()
        with torch.no_grad():  # non-trivial batch-norm statistics, so folding them is tested
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm1d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 1.5)
        path = os.path.join(OUT, name + ".nemo")
        model.save_to(path)
        cfg = OmegaConf.to_container(model.cfg, resolve=True)
        vocab = list(model.decoder.vocabulary) if hasattr(model.decoder, "vocabulary") else []
        if hasattr(model, "tokenizer") and model.tokenizer is not None:
            vocab = [model.tokenizer.ids_to_tokens([i])[0] for i in range(model.tokenizer.vocab_size)]
        ref[name] = {"vocabulary": vocab, "encoder": cfg["encoder"], "preprocessor": cfg["preprocessor"],
                     "tensors": {k: list(v.shape) for k, v in model.state_dict().items()}}
        print("wrote", path, os.path.getsize(path), "bytes")

    ctc_bpe = OmegaConf.create({
        "sample_rate": 16000, "tokenizer": {"dir": tok, "type": "bpe"},
        "preprocessor": preprocessor(80), "encoder": encoder(80),
        "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": None,
                    "num_classes": -1, "vocabulary": []},
        "train_ds": None, "validation_ds": None, "test_ds": None, "optim": None,
    })
    save(EncDecCTCModelBPE(cfg=ctc_bpe), "parakeet_ctc_bpe")

    labels = [" ", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r",
              "s", "t", "u", "v", "w", "x", "y", "z", "'"]
    ctc_char = OmegaConf.create({
        "sample_rate": 16000, "labels": labels, "preprocessor": preprocessor(64),
        "encoder": encoder(64, subsampling="striding", subsampling_factor=4, self_attention_model="rel_pos",
                           conv_kernel_size=5, xscaling=False),
        "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": 32,
                    "num_classes": len(labels), "vocabulary": labels},
        "train_ds": None, "validation_ds": None, "test_ds": None, "optim": None,
    })
    save(EncDecCTCModel(cfg=ctc_char), "conformer_ctc_char")

    durations = [0, 1, 2, 3, 4]
    tdt = OmegaConf.create({
        "sample_rate": 16000, "tokenizer": {"dir": tok, "type": "bpe"},
        "model_defaults": {"enc_hidden": 32, "pred_hidden": 24, "joint_hidden": 20, "tdt_durations": durations,
                           "num_tdt_durations": len(durations)},
        "preprocessor": preprocessor(128), "encoder": encoder(128),
        "decoder": {"_target_": "nemo.collections.asr.modules.RNNTDecoder", "normalization_mode": None,
                    "random_state_sampling": False, "blank_as_pad": True,
                    "prednet": {"pred_hidden": 24, "pred_rnn_layers": 1, "t_max": None, "dropout": 0.0}},
        "joint": {"_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None,
                  "preserve_memory": False, "fuse_loss_wer": False, "fused_batch_size": 4,
                  "num_extra_outputs": len(durations),
                  "jointnet": {"joint_hidden": 20, "activation": "relu", "dropout": 0.0}},
        "decoding": {"strategy": "greedy_batch", "model_type": "tdt", "durations": durations,
                     "greedy": {"max_symbols": 10}},
        "loss": {"loss_name": "tdt", "tdt_kwargs": {"fastemit_lambda": 0.0, "clamp": -1.0,
                                                    "durations": durations, "sigma": 0.02, "omega": 0.1}},
        "train_ds": None, "validation_ds": None, "test_ds": None, "optim": None,
    })
    save(EncDecRNNTBPEModel(cfg=tdt), "parakeet_tdt_bpe")
    return ref


def gigaam_part():
    """Runs in the gigaam venv: a tiny GigaAMASR (CTC, characters) saved as gigaam's .ckpt files are."""
    import torch
    from omegaconf import OmegaConf
    from gigaam.model import GigaAMASR

    torch.manual_seed(1)
    labels = [" ", "а", "б", "в", "г", "д", "е", "ж", "з", "и", "й", "к", "л", "м", "н", "о", "п", "р", "с",
              "т", "у", "ф", "х", "ц", "ч", "ш", "щ", "ъ", "ы", "ь", "э", "ю", "я"]
    cfg = OmegaConf.create({
        "model_name": "v2_ctc",
        "sample_rate": 16000,
        "preprocessor": {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": 16000, "features": 64},
        "encoder": {"_target_": "gigaam.encoder.ConformerEncoder", "feat_in": 64, "n_layers": 2, "d_model": 32,
                    "subsampling_factor": 4, "ff_expansion_factor": 4, "self_attention_model": "rotary",
                    "pos_emb_max_len": 5000, "n_heads": 4, "conv_kernel_size": 5, "flash_attn": False},
        "head": {"_target_": "gigaam.decoder.CTCHead", "feat_in": 32, "num_classes": len(labels) + 1},
        "decoding": {"_target_": "gigaam.decoding.CTCGreedyDecoding", "vocabulary": labels},
    })
    model = GigaAMASR(cfg)
    # A fuzzing seed for the torch checkpoint reader: an OmegaConf config beside a tiny state dict.
    seed = os.path.join(ROOT, "tests", "fuzz", "corpus", "torch_checkpoint", "omegaconf_cfg.ckpt")
    torch.save({"cfg": OmegaConf.create({"encoder": {"d_model": 4, "n": [1, 2.5, "x", None, True]}}),
                "state_dict": {"w": torch.zeros(2)}}, seed)
    path = os.path.join(OUT, "gigaam_ctc.ckpt")
    torch.save({"cfg": cfg, "state_dict": model.state_dict()}, path)
    ref = {"vocabulary": labels, "encoder": OmegaConf.to_container(cfg.encoder),
           "tensors": {k: list(v.shape) for k, v in model.state_dict().items()}}
    print("wrote", path, os.path.getsize(path), "bytes")

    # RNN-T with a SentencePiece tokenizer, as v1_rnnt ships: <name>_tokenizer.model beside the .ckpt.
    import sentencepiece as spm

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "text.txt"), "w") as f:
            f.write("\n".join(["привет как дела у тебя сегодня", "модель распознавания речи"] * 30))
        spm.SentencePieceTrainer.train(input=os.path.join(tmp, "text.txt"), model_prefix=os.path.join(tmp, "t"),
                                       vocab_size=30, model_type="bpe", character_coverage=1.0)
        tok_path = os.path.join(OUT, "gigaam_rnnt_tokenizer.model")
        with open(os.path.join(tmp, "t.model"), "rb") as src, open(tok_path, "wb") as dst:
            dst.write(src.read())
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    n = len(sp)
    rnnt = OmegaConf.create({
        "model_name": "v2_rnnt", "sample_rate": 16000,
        "preprocessor": {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": 16000, "features": 64},
        "encoder": {"_target_": "gigaam.encoder.ConformerEncoder", "feat_in": 64, "n_layers": 2, "d_model": 32,
                    "subsampling_factor": 4, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
                    "pos_emb_max_len": 5000, "n_heads": 4, "conv_kernel_size": 5, "flash_attn": False},
        "head": {"_target_": "gigaam.decoder.RNNTHead",
                 "decoder": {"pred_hidden": 24, "pred_rnn_layers": 1, "num_classes": n + 1},
                 "joint": {"enc_hidden": 32, "pred_hidden": 24, "joint_hidden": 20, "num_classes": n + 1}},
        "decoding": {"_target_": "gigaam.decoding.RNNTGreedyDecoding", "vocabulary": [],
                     "model_path": "/data/checkpoints/v1_rnnt_tokenizer.model", "max_symbols_per_step": 7},
    })
    cfg_for_build = rnnt.copy()
    cfg_for_build.decoding.model_path = tok_path
    model = GigaAMASR(cfg_for_build)
    path = os.path.join(OUT, "gigaam_rnnt.ckpt")
    torch.save({"cfg": rnnt, "state_dict": model.state_dict()}, path)
    ref = {"ctc": ref, "rnnt": {"vocabulary": [sp.id_to_piece(i) for i in range(n)],
                                "tensors": {k: list(v.shape) for k, v in model.state_dict().items()}}}
    json.dump(ref, open(os.path.join(OUT, "gigaam_reference.json"), "w"), indent=1, ensure_ascii=False)
    print("wrote", path, os.path.getsize(path), "bytes")


def small_tars():
    """Python's tarfile in each header format (long names: pax records, GNU 'L' entries), plain and
    gzip: tar-reader fixtures and the fuzzer's seeds (tests/fuzz/corpus/nemo_archive)."""
    import gzip
    import io
    import tarfile

    seeds = os.path.join(ROOT, "tests", "fuzz", "corpus", "nemo_archive")
    os.makedirs(seeds, exist_ok=True)
    long_name = "./" + "d" * 60 + "/" + "n" * 90 + "_tokenizer.model"
    members = [("./model_config.yaml", b"encoder:\n  d_model: 4\n"), (long_name, b"piece bytes"), ("./empty.txt", b"")]
    for fmt, tag in ((tarfile.PAX_FORMAT, "pax"), (tarfile.GNU_FORMAT, "gnu"), (tarfile.USTAR_FORMAT, "ustar")):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:", format=fmt) as tar:
            for name, data in members:
                if fmt == tarfile.USTAR_FORMAT and len(name) > 100:
                    name = "./" + "d" * 60 + "/" + "n" * 20 + "_tokenizer.model"  # ustar prefix field
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        raw = buf.getvalue()
        open(os.path.join(OUT, f"small_{tag}.tar"), "wb").write(raw)
        open(os.path.join(seeds, f"small_{tag}.tar"), "wb").write(raw)
        if tag == "pax":
            import torch  # a .nemo in miniature: config, a tiny state dict, a tokenizer name

            state = io.BytesIO()
            torch.save({"encoder.w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, state)
            nemo = io.BytesIO()
            with tarfile.open(fileobj=nemo, mode="w:") as tar:
                for name, data in members[:1] + [("./model_weights.ckpt", state.getvalue())]:
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
            open(os.path.join(seeds, "mini.nemo"), "wb").write(nemo.getvalue())
            gz = gzip.compress(raw, mtime=0)
            open(os.path.join(OUT, "small_pax.tar.gz"), "wb").write(gz)
            open(os.path.join(seeds, "small_pax.tar.gz"), "wb").write(gz)


def main():
    if "--gigaam" in sys.argv:
        return gigaam_part()
    os.makedirs(OUT, exist_ok=True)
    small_tars()
    if "--small-only" in sys.argv:
        return
    with tempfile.TemporaryDirectory() as tmp:
        ref = nemo_models(tmp)
    json.dump(ref, open(os.path.join(OUT, "nemo_reference.json"), "w"), indent=1, ensure_ascii=False)
    gigaam_python = os.environ.get("GIGAAM_PYTHON", "/work/gigaamvenv/bin/python")
    subprocess.run([gigaam_python, os.path.abspath(__file__), "--gigaam"], check=True)


if __name__ == "__main__":
    main()
