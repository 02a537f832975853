"""`npu serve`'s POST /v1/audio/transcriptions and /v1/audio/translations through the official openai client.

Serves a temp store holding whisper-tiny.en from the default store (skipped when it has not been
pulled: `npu model pull whisper-tiny.en`) and transcribes a LibriVox clip of Debian's
pocketsphinx-testdata (skipped when absent) with response_format json, verbose_json, srt, vtt and
text. The error cases need no model. Run through run_client_tests.py, which sets XDNA_NPU_BINARY.
"""
import io
import os
import re
import unittest

import openai
from npu_server import ServedStoreTest, default_store, link_default_model, write_manifest

MODEL = "whisper-tiny.en"
CLIP = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0930.wav"
CLIP_TEXT = "he might even have been made amiable himself"


def normalise(text: str) -> str:
    """Lower case, punctuation and hyphens as spaces: "Ill-disposed." -> "ill disposed"."""
    return " ".join(re.sub(r"[^a-z0-9']+", " ", text.lower()).split())


def add_manifest(store: str, name: str, family: str) -> None:
    """A model directory with only a manifest: listed by the server, never loaded here."""
    os.makedirs(os.path.join(store, name))
    write_manifest(os.path.join(store, name), name, family, "ctranslate2", "f16", [])


class OpenAIAudio(ServedStoreTest):
    store_prefix = "xdna-client-audio-"

    @classmethod
    def fill_store(cls, store):
        add_manifest(store, "some-bert", "bert")
        cls.have_model = link_default_model(store, MODEL)

    def need_model(self):
        if not self.have_model:
            self.skipTest(f"{MODEL} is not in {default_store()} (`npu model pull {MODEL}`)")
        if not os.path.exists(CLIP):
            self.skipTest(f"{CLIP} is absent (Debian package pocketsphinx-testdata)")

    def test_json(self):
        self.need_model()
        with open(CLIP, "rb") as f:
            r = self.client.audio.transcriptions.create(model=MODEL, file=f)
        self.assertEqual(normalise(r.text), CLIP_TEXT)

    def test_verbose_json_segments(self):
        self.need_model()
        with open(CLIP, "rb") as f:
            r = self.client.audio.transcriptions.create(model=MODEL, file=f, response_format="verbose_json",
                                                        timestamp_granularities=["segment"], language="en",
                                                        temperature=0)
        self.assertEqual(r.language, "english")
        self.assertAlmostEqual(r.duration, 3.29, delta=0.02)
        self.assertEqual(normalise(r.text), CLIP_TEXT)
        self.assertGreaterEqual(len(r.segments), 1)
        s = r.segments[0]
        self.assertEqual(s.id, 0)
        self.assertGreaterEqual(s.start, 0.0)
        self.assertGreater(s.end, s.start)
        self.assertLessEqual(r.segments[-1].end, 3.8)
        self.assertTrue(s.tokens)
        self.assertLess(s.avg_logprob, 0.0)

    def test_srt_and_vtt(self):
        self.need_model()
        with open(CLIP, "rb") as f:
            srt = self.client.audio.transcriptions.create(model=MODEL, file=f, response_format="srt")
        self.assertIsInstance(srt, str)
        self.assertRegex(srt, r"^1\n00:00:\d\d,\d\d\d --> 00:00:\d\d,\d\d\d\n")
        self.assertIn("made amiable himself", normalise(srt))
        with open(CLIP, "rb") as f:
            vtt = self.client.audio.transcriptions.create(model=MODEL, file=("clip.wav", f.read()),
                                                          response_format="vtt")
        self.assertRegex(vtt, r"^WEBVTT\n\n00:00:\d\d\.\d\d\d --> ")

    def test_text(self):
        self.need_model()
        with open(CLIP, "rb") as f:
            text = self.client.audio.transcriptions.create(model=MODEL, file=f, response_format="text")
        self.assertEqual(normalise(text), CLIP_TEXT)

    def test_english_only_model_cannot_translate(self):
        self.need_model()
        with open(CLIP, "rb") as f:
            with self.assertRaises(openai.BadRequestError):
                self.client.audio.translations.create(model=MODEL, file=f)

    def test_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.audio.transcriptions.create(model="some-bert", file=("notes.txt", io.BytesIO(b"not audio")))
        self.assertEqual(e.exception.param, "file")
        self.assertIn("notes.txt", str(e.exception))
        if os.path.exists(CLIP):
            with open(CLIP, "rb") as f:
                with self.assertRaises(openai.NotFoundError) as e:
                    self.client.audio.transcriptions.create(model="no-such-model", file=f)
            self.assertEqual(e.exception.code, "model_not_found")
            with open(CLIP, "rb") as f:
                with self.assertRaises(openai.BadRequestError) as e:
                    self.client.audio.transcriptions.create(model="some-bert", file=f)
            self.assertEqual(e.exception.code, "model_not_supported")


if __name__ == "__main__":
    unittest.main()
