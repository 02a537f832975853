#!/usr/bin/env python3
"""Reference fixtures for the conformer ASR heads' greedy decoding (src/models/conformer_decode.cpp).

Tiny randomly initialised heads with fixed seeds, run on fixed random encoder outputs [T, d_model]:

  python scripts/make_transducer_fixtures.py hf      # /work/venv: transformers 5.24.0 Parakeet CTC / RNN-T / TDT
  python scripts/make_transducer_fixtures.py gigaam  # gigaam 0.1.0 venv: GigaAM's RNNTHead + RNNTGreedyDecoding
  python scripts/make_transducer_fixtures.py nemo    # nemo_toolkit 3.0.0 venv: checks (writes nothing) that NeMo's
                                                     # RNNTDecoder/RNNTJoint load the Parakeet fixtures' weights under
                                                     # their names (strict) and its greedy decoders (label-looping and
                                                     # per-sample) give the recorded tokens, frames and durations

Writes tests/fixtures/conformer/heads/:
  <case>.safetensors  head weights under the checkpoint's own names (NeMo names for Parakeet, as
                      transformers' convert_nemo_to_hf.py maps them; GigaAM's "head.*" names)
  <case>.json         config, encoder output (row-major [T, d_model]), expected tokens (id, frame, duration)
  parakeet_{rnnt,tdt}_tiny_hf/  whole tiny transformers checkpoints (save_pretrained) + input features and
                      the full model's generated tokens (end-to-end test once the loader lands).

The blank row of the prediction network's embedding is zeroed as NeMo's (padding_idx = blank) and GigaAM's
checkpoints have it: NeMo feeds a zero vector for the start symbol, transformers looks up the blank row.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

torch.set_num_threads(1)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "conformer", "heads")


def write_safetensors(path, tensors):
    """Plain safetensors writer (numpy only, so it runs in either venv)."""
    header, blobs, offset = {}, [], 0
    for name, value in tensors.items():
        array = np.ascontiguousarray(value.detach().cpu().numpy() if torch.is_tensor(value) else value, dtype=np.float32)
        data = array.tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def floats(t):
    return [float(v) for v in t.detach().cpu().numpy().astype(np.float32).reshape(-1)]


def tokens_from_steps(ids, durations, blank, tdt):
    """transformers' generate() output (one entry per step, blanks included; a step's frame is the sum
    of the durations before it) -> the non-blank tokens with their frame and duration."""
    out, frame = [], 0
    for token, duration in zip(ids, durations):
        if token != blank:
            out.append({"id": int(token), "frame": int(frame), "duration": int(duration) if tdt else 0})
        frame += int(duration)
    return out


# ---- transformers Parakeet -----------------------------------------------------------------------

def hf_cases():
    from transformers import (ParakeetCTCConfig, ParakeetEncoderConfig, ParakeetForCTC, ParakeetForRNNT,
                              ParakeetForTDT, ParakeetRNNTConfig, ParakeetTDTConfig)
    from transformers.models.parakeet.modeling_parakeet import ParakeetEncoderModelOutput

    d_model, hidden = 16, 16
    encoder_config = ParakeetEncoderConfig(hidden_size=d_model, num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=32, conv_kernel_size=5, subsampling_conv_channels=8,
                                           num_mel_bins=80, layerdrop=0.0, dropout=0.0, attention_dropout=0.0,
                                           activation_dropout=0.0)

    def nemo_head(model, with_durations):
        """transformers' transducer parameters under NeMo's names (convert_nemo_to_hf.py, reversed)."""
        sd = model.state_dict()
        out = {"decoder.prediction.embed.weight": sd["decoder.embedding.weight"]}
        for key, value in sd.items():
            if key.startswith("decoder.lstm."):
                out["decoder.prediction.dec_rnn.lstm." + key[len("decoder.lstm."):]] = value
        out["joint.enc.weight"] = sd["encoder_projector.weight"]
        out["joint.enc.bias"] = sd["encoder_projector.bias"]
        out["joint.pred.weight"] = sd["decoder.decoder_projector.weight"]
        out["joint.pred.bias"] = sd["decoder.decoder_projector.bias"]
        out["joint.joint_net.2.weight"] = sd["joint.head.weight"]
        out["joint.joint_net.2.bias"] = sd["joint.head.bias"]
        return out

    def prepare(model, blank, blank_bias, seed):
        torch.manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * 0.5)
            model.decoder.embedding.weight[blank].zero_()
            model.joint.head.bias[blank] += blank_bias
        model.eval()

    def generate_on(model, encoded):
        """transformers' greedy generate() with the encoder replaced by the fixed output."""
        T = encoded.shape[0]

        def fixed_audio_features(**kwargs):
            return ParakeetEncoderModelOutput(last_hidden_state=encoded[None], attention_mask=None,
                                              pooler_output=model.encoder_projector(encoded[None]))

        model.get_audio_features = fixed_audio_features
        try:
            with torch.no_grad():
                out = model.generate(input_features=torch.zeros(1, 8 * T, 80), return_dict_in_generate=True,
                                     max_new_tokens=(model.max_symbols_per_step + 1) * T + 1)
        finally:
            del model.get_audio_features
        return out.sequences[0].tolist()[1:], out.durations[0].tolist()[1:]  # drop the start token

    def nemo_reference(model, encoded, durations, max_symbols, blank):
        """NeMo's label-looping greedy rule (tdt_label_looping.py / rnnt_label_looping.py), batch 1, using
        transformers' modules: decoder state advances on non-blank only; TDT blanks advance >= 1 frame;
        after max_symbols consecutive tokens on one frame the frame advances by one."""
        T = encoded.shape[0]
        n_dur = len(durations) if durations else 0
        with torch.no_grad():
            enc = model.encoder_projector(encoded)
            emb = torch.zeros(1, 1, hidden)
            h = torch.zeros(model.config.num_decoder_layers, 1, hidden)
            c = torch.zeros_like(h)
            out, (h, c) = model.decoder.lstm(emb, (h, c))
            g = model.decoder.decoder_projector(out)[0, 0]
            t, tokens, run_frame, run = 0, [], -1, 0
            while t < T:
                logits = model.joint.head(torch.relu(enc[t] + g))
                k = int(logits[: logits.shape[0] - n_dur].argmax())
                d = durations[int(logits[logits.shape[0] - n_dur:].argmax())] if n_dur else (1 if k == blank else 0)
                if k == blank:
                    t += max(d, 1)
                    continue
                tokens.append({"id": k, "frame": t, "duration": d if n_dur else 0})
                run = run + 1 if run_frame == t else 1
                run_frame = t
                out, (h, c) = model.decoder.lstm(model.decoder.embedding(torch.tensor([[k]])), (h, c))
                g = model.decoder.decoder_projector(out)[0, 0]
                t += d
                if d == 0 and run >= max_symbols:
                    t += 1
        return tokens

    def head_config(cfg, head, durations=None):
        return {"head": head, "d_model": d_model, "vocab_size": cfg.vocab_size - 1, "pred_hidden": hidden,
                "pred_layers": cfg.num_decoder_layers, "joint_hidden": hidden, "durations": durations or [],
                "max_symbols_per_step": cfg.max_symbols_per_step}

    def describe(tokens):
        per_frame = {}
        for tok in tokens:
            per_frame[tok["frame"]] = per_frame.get(tok["frame"], 0) + 1
        return len(tokens), max(per_frame.values()) if per_frame else 0, sorted({t["duration"] for t in tokens})

    # RNN-T: max_symbols 3 so that the per-frame guard is reached on the fixture.
    vocab = 12  # 11 tokens + blank
    cfg = ParakeetRNNTConfig(vocab_size=vocab, blank_token_id=vocab - 1, pad_token_id=vocab - 1,
                             decoder_start_token_id=vocab - 1, decoder_hidden_size=hidden, num_decoder_layers=2,
                             max_symbols_per_step=3, encoder_config=encoder_config.to_dict())
    for seed in range(100):
        model = ParakeetForRNNT(cfg)
        prepare(model, vocab - 1, 1.0, seed)
        encoded = torch.randn(12, d_model, generator=torch.Generator().manual_seed(1000 + seed))
        tokens = nemo_reference(model, encoded, None, cfg.max_symbols_per_step, vocab - 1)
        count, most, _ = describe(tokens)
        distinct = len({t["id"] for t in tokens})
        silent = encoded.shape[0] - len({t["frame"] for t in tokens})
        if count >= 8 and most >= 3 and distinct >= 4 and silent >= 2:
            break
    else:
        raise SystemExit("no RNN-T seed gave a useful fixture")
    ids, durs = generate_on(model, encoded)
    assert tokens_from_steps(ids, durs, vocab - 1, False) == tokens, "transformers disagrees with the NeMo rule"
    print("parakeet_rnnt: seed", seed, "tokens", count, "most per frame", most)
    write_safetensors(os.path.join(OUT, "parakeet_rnnt.safetensors"), nemo_head(model, False))
    write_json(os.path.join(OUT, "parakeet_rnnt.json"), {
        "reference": "transformers 5.24.0 ParakeetForRNNT.generate (greedy) on a fixed encoder output",
        "config": head_config(cfg, "rnnt"), "frames": encoded.shape[0], "encoded": floats(encoded),
        "tokens": tokens})
    rnnt_model = model

    # TDT.
    durations = [0, 1, 2, 3, 4]
    vocab = 10
    cfg = ParakeetTDTConfig(vocab_size=vocab, blank_token_id=vocab - 1, pad_token_id=0,
                            decoder_start_token_id=vocab - 1, decoder_hidden_size=hidden, num_decoder_layers=1,
                            durations=durations, max_symbols_per_step=10, encoder_config=encoder_config.to_dict())
    for seed in range(200):
        model = ParakeetForTDT(cfg)
        prepare(model, vocab - 1, 0.5, seed)
        with torch.no_grad():
            # transformers' generate() takes the argmax over tokens AND duration logits together (NeMo takes
            # them separately); a uniform shift of the duration logits keeps the duration argmax and keeps
            # them below the best token so both agree.
            model.joint.head.bias[vocab:] -= 100.0
        encoded = torch.randn(20, d_model, generator=torch.Generator().manual_seed(2000 + seed))
        tokens = nemo_reference(model, encoded, durations, cfg.max_symbols_per_step, vocab - 1)
        count, most, used = describe(tokens)
        if len({t["id"] for t in tokens}) < 4:
            continue
        if count >= 6 and most >= 2 and len(used) >= 3 and most < cfg.max_symbols_per_step:
            ids, durs = generate_on(model, encoded)
            assert tokens_from_steps(ids, durs, vocab - 1, True) == tokens, "transformers disagrees with NeMo's rule"
            if any(i == vocab - 1 for i in ids):  # some blank steps too
                break
    else:
        raise SystemExit("no TDT seed gave a useful fixture")
    print("parakeet_tdt: seed", seed, "tokens", count, "most per frame", most, "durations", used)
    write_safetensors(os.path.join(OUT, "parakeet_tdt.safetensors"), nemo_head(model, True))
    write_json(os.path.join(OUT, "parakeet_tdt.json"), {
        "reference": "transformers 5.24.0 ParakeetForTDT.generate (greedy) on a fixed encoder output",
        "config": head_config(cfg, "tdt", durations), "frames": encoded.shape[0], "encoded": floats(encoded),
        "tokens": tokens})
    tdt_model = model

    # TDT with max_symbols_per_step 2: transformers' TDT generate has no per-frame guard, NeMo's has
    # (force one frame after max_symbols tokens on one frame); the reference is that rule, above.
    for seed in range(400):
        model = ParakeetForTDT(cfg)
        prepare(model, vocab - 1, -1.0, seed)
        with torch.no_grad():
            model.joint.head.bias[vocab] += 2.0  # favour duration 0 so frames collect several tokens
        encoded = torch.randn(10, d_model, generator=torch.Generator().manual_seed(3000 + seed))
        tokens = nemo_reference(model, encoded, durations, 2, vocab - 1)
        count, most, used = describe(tokens)
        if count >= 6 and most >= 2 and 0 in used and len(used) >= 2:
            break
    else:
        raise SystemExit("no TDT max-symbols seed gave a useful fixture")
    print("parakeet_tdt_maxsym: seed", seed, "tokens", count, "durations", used)
    config = head_config(cfg, "tdt", durations)
    config["max_symbols_per_step"] = 2
    write_safetensors(os.path.join(OUT, "parakeet_tdt_maxsym.safetensors"), nemo_head(model, True))
    write_json(os.path.join(OUT, "parakeet_tdt_maxsym.json"), {
        "reference": "NeMo's label-looping TDT rule with max_symbols_per_step 2 (re-implemented in the script on "
                     "transformers 5.24.0 ParakeetForTDT modules; transformers' TDT generate has no such guard)",
        "config": config, "frames": encoded.shape[0], "encoded": floats(encoded), "tokens": tokens})

    # CTC: transformers' per-frame argmax; the collapse (merge repeats, drop blanks) is ctc_greedy's job.
    vocab = 8
    cfg = ParakeetCTCConfig(vocab_size=vocab, pad_token_id=vocab - 1, encoder_config=encoder_config.to_dict())
    for seed in range(200):
        torch.manual_seed(seed)
        model = ParakeetForCTC(cfg).eval()
        encoded = torch.randn(24, d_model, generator=torch.Generator().manual_seed(4000 + seed))
        with torch.no_grad():
            for p in model.ctc_head.parameters():
                p.copy_(torch.randn_like(p) * 0.5)
            model.ctc_head.bias[vocab - 1] += 1.0
            logits = model.ctc_head(encoded[None])[0]
            frame_ids = logits.argmax(-1).tolist()  # ParakeetForCTC.generate: logits.argmax(-1)
        tokens, prev = [], -1
        for t, k in enumerate(frame_ids):
            if k != prev and k != vocab - 1:
                tokens.append({"id": k, "frame": t, "duration": 0})
            prev = k
        merged = any(a == b != vocab - 1 for a, b in zip(frame_ids, frame_ids[1:]))
        split = any(a == c != vocab - 1 and b == vocab - 1 for a, b, c in zip(frame_ids, frame_ids[1:], frame_ids[2:]))
        if len(tokens) >= 5 and merged and split:
            break
    else:
        raise SystemExit("no CTC seed gave a useful fixture")
    print("parakeet_ctc: frame ids", frame_ids)
    write_safetensors(os.path.join(OUT, "parakeet_ctc.safetensors"), {
        "decoder.decoder_layers.0.weight": model.ctc_head.weight, "decoder.decoder_layers.0.bias": model.ctc_head.bias})
    write_json(os.path.join(OUT, "parakeet_ctc.json"), {
        "reference": "transformers 5.24.0 ParakeetForCTC head (logits) and generate's per-frame argmax",
        "config": {"head": "ctc", "d_model": d_model, "vocab_size": vocab - 1}, "frames": encoded.shape[0],
        "encoded": floats(encoded), "logits": floats(logits), "frame_ids": frame_ids, "tokens": tokens})

    # Whole tiny checkpoints for the end-to-end test.
    for name, model in (("parakeet_rnnt_tiny_hf", rnnt_model), ("parakeet_tdt_tiny_hf", tdt_model)):
        path = os.path.join(OUT, name)
        model.save_pretrained(path)
        features = torch.randn(1, 96, 80, generator=torch.Generator().manual_seed(5000))
        with torch.no_grad():
            out = model.generate(input_features=features, return_dict_in_generate=True)
            encoded = model.get_audio_features(input_features=features).last_hidden_state[0]
        ids, durs = out.sequences[0].tolist()[1:], out.durations[0].tolist()[1:]
        blank = model.config.blank_token_id
        tokens = tokens_from_steps(ids, durs, blank, name == "parakeet_tdt_tiny_hf")
        print(name, "end-to-end tokens", len(tokens), "encoded frames", encoded.shape[0])
        write_safetensors(os.path.join(path, "input_features.safetensors"), {"input_features": features[0]})
        write_json(os.path.join(path, "expected.json"), {
            "reference": "transformers 5.24.0 generate (greedy) on input_features [frames, n_mels]",
            "encoded_frames": encoded.shape[0], "tokens": tokens})


# ---- GigaAM ----------------------------------------------------------------------------------------

def gigaam_cases():
    from gigaam.decoder import RNNTHead
    from gigaam.decoding import RNNTGreedyDecoding

    vocab = [" ", "а", "б", "в", "г", "д", "е", "ж", "з", "и"]  # character vocabulary; blank = len(vocab)
    d_model, pred_hidden, joint_hidden = 16, 12, 20
    classes = len(vocab) + 1
    for seed in range(200):
        torch.manual_seed(seed)
        head = RNNTHead(decoder={"pred_hidden": pred_hidden, "pred_rnn_layers": 1, "num_classes": classes},
                        joint={"enc_hidden": d_model, "pred_hidden": pred_hidden, "joint_hidden": joint_hidden,
                               "num_classes": classes}).eval()
        with torch.no_grad():
            for name, p in head.named_parameters():
                p.copy_(torch.randn_like(p) * 0.5)
            head.decoder.embed.weight[classes - 1].zero_()
            head.joint.joint_net[1].bias[classes - 1] += 3.0
        encoded = torch.randn(14, d_model, generator=torch.Generator().manual_seed(6000 + seed))
        decoding = RNNTGreedyDecoding(vocab, max_symbols_per_step=3)
        captured = []
        real_decode = decoding.tokenizer.decode
        decoding.tokenizer.decode = lambda ids: (captured.append(list(ids)), real_decode(ids))[1]
        text = decoding.decode(head, encoded.T[None], torch.tensor([encoded.shape[0]]))[0]
        ids = captured[0]
        # Frames: gigaam's loop returns only the text; replay it step by step (same modules, same rule).
        tokens, state, last = [], None, None
        with torch.no_grad():
            for t in range(encoded.shape[0]):
                f = encoded[t][None, None]
                emitted = 0
                while emitted < decoding.max_symbols:
                    g, hidden = head.decoder.predict(last, state)
                    k = int(head.joint.joint(f, g)[0, 0, 0].argmax())
                    if k == classes - 1:
                        break
                    tokens.append({"id": k, "frame": t, "duration": 0})
                    state, last = hidden, torch.tensor([[k]])
                    emitted += 1
        assert [t["id"] for t in tokens] == ids, (tokens, ids)
        per_frame = {}
        for tok in tokens:
            per_frame[tok["frame"]] = per_frame.get(tok["frame"], 0) + 1
        counts = [per_frame.get(t, 0) for t in range(encoded.shape[0])]
        if len(tokens) >= 8 and counts.count(0) >= 2 and counts.count(3) >= 1 and counts.count(1) + counts.count(2) >= 2:
            break
    else:
        raise SystemExit("no GigaAM seed gave a useful fixture")
    print("gigaam_rnnt: seed", seed, "text", repr(text))
    sd = {"head." + k: v for k, v in head.state_dict().items()}
    write_safetensors(os.path.join(OUT, "gigaam_rnnt.safetensors"), sd)
    write_json(os.path.join(OUT, "gigaam_rnnt.json"), {
        "reference": "gigaam 0.1.0 RNNTGreedyDecoding.decode (max_symbols_per_step 3) on a fixed encoder output",
        "config": {"head": "rnnt", "d_model": d_model, "vocab_size": len(vocab), "pred_hidden": pred_hidden,
                   "pred_layers": 1, "joint_hidden": joint_hidden, "durations": [], "max_symbols_per_step": 3},
        "vocabulary": vocab, "frames": encoded.shape[0], "encoded": floats(encoded), "tokens": tokens,
        "text": text})


# ---- NeMo check --------------------------------------------------------------------------------------

def read_safetensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    out = {}
    for name, v in json.loads(blob[8:8 + n]).items():
        start, end = v["data_offsets"]
        data = np.frombuffer(blob[8 + n + start:8 + n + end], dtype=np.float32).reshape(v["shape"])
        out[name] = torch.from_numpy(data.copy())
    return out


def nemo_check():
    from nemo.collections.asr.modules.rnnt import RNNTDecoder, RNNTJoint
    from nemo.collections.asr.parts.submodules import rnnt_greedy_decoding as greedy

    for case in ("parakeet_rnnt", "parakeet_tdt", "parakeet_tdt_maxsym"):
        fixture = json.load(open(os.path.join(OUT, case + ".json")))
        c = fixture["config"]
        V, durations, m = c["vocab_size"], c["durations"], c["max_symbols_per_step"]
        decoder = RNNTDecoder(prednet={"pred_hidden": c["pred_hidden"], "pred_rnn_layers": c["pred_layers"]},
                              vocab_size=V, blank_as_pad=True)
        # dropout > 0 as in Parakeet's configs: joint_net is (ReLU, Dropout, Linear), hence joint_net.2.
        joint = RNNTJoint(jointnet={"encoder_hidden": c["d_model"], "pred_hidden": c["pred_hidden"],
                                    "joint_hidden": c["joint_hidden"], "activation": "relu", "dropout": 0.2},
                          num_classes=V, num_extra_outputs=len(durations))
        weights = read_safetensors(os.path.join(OUT, case + ".safetensors"))
        for module, prefix in ((decoder, "decoder."), (joint, "joint.")):
            module.load_state_dict({k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}, strict=True)
            module.eval()
        encoded = torch.tensor(fixture["encoded"]).reshape(fixture["frames"], c["d_model"]).T[None]  # [B, D, T]
        lengths = torch.tensor([fixture["frames"]])
        if c["head"] == "tdt":
            decoders = {"label-looping": greedy.GreedyBatchedTDTInfer(decoder, joint, blank_index=V, durations=durations,
                                                                      max_symbols_per_step=m, include_duration=True,
                                                                      use_cuda_graph_decoder=False),
                        "per-sample": greedy.GreedyTDTInfer(decoder, joint, blank_index=V, durations=durations,
                                                            max_symbols_per_step=m, include_duration=True)}
        else:
            decoders = {"label-looping": greedy.GreedyBatchedRNNTInfer(decoder, joint, blank_index=V, max_symbols_per_step=m,
                                                                       loop_labels=True, use_cuda_graph_decoder=False),
                        "per-sample": greedy.GreedyRNNTInfer(decoder, joint, blank_index=V, max_symbols_per_step=m)}
        want = fixture["tokens"]
        for name, infer in decoders.items():
            hyp = infer(encoder_output=encoded, encoded_lengths=lengths)[0][0]
            got = {"id": [int(x) for x in hyp.y_sequence], "frame": [int(x) for x in hyp.timestamp]}
            if c["head"] == "tdt":
                got["duration"] = [int(x) for x in hyp.token_duration]
            for key, values in got.items():
                assert values == [t[key] for t in want], (case, name, key, values)
            print(case, "NeMo", name, "matches")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    part = sys.argv[1] if len(sys.argv) > 1 else ""
    if part == "hf":
        hf_cases()
    elif part == "gigaam":
        gigaam_cases()
    elif part == "nemo":
        nemo_check()
    else:
        raise SystemExit("usage: make_transducer_fixtures.py hf|gigaam|nemo")
