"""`npu serve`'s POST /v1/embeddings through the official openai Python client.

Serves a temp store holding the tiny BERT fixture (tests/fixtures/encoders/tiny-bert-e5, checked
against its sentence-transformers reference), plus all-minilm-l6-v2 from the default store when it
has been pulled (checked against `npu embed --json`). Run through run_client_tests.py, which sets
XDNA_NPU_BINARY.
"""
import base64
import json
import math
import os
import struct
import subprocess
import unittest

import openai
from npu_server import ServedStoreTest, add_fixture_model, default_store, link_default_model, npu_binary

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "fixtures", "encoders", "tiny-bert-e5")
REAL_MODEL = "all-minilm-l6-v2"


def cosine(a, b) -> float:
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


class OpenAIEmbeddings(ServedStoreTest):
    @classmethod
    def fill_store(cls, store):
        cls.npu = npu_binary()
        add_fixture_model(store, "tiny-bert", FIXTURE, "bert")
        cls.has_real = link_default_model(store, REAL_MODEL)
        with open(os.path.join(FIXTURE, "reference.json")) as f:
            cls.ref = json.load(f)["inputs"]

    def test_string_with_the_clients_default_base64(self):
        r = self.client.embeddings.create(model="tiny-bert", input=self.ref[0]["text"])
        self.assertEqual(r.object, "list")
        self.assertEqual(r.model, "tiny-bert")
        self.assertEqual(len(r.data), 1)
        self.assertEqual(r.data[0].index, 0)
        self.assertEqual(len(r.data[0].embedding), 32)
        self.assertGreaterEqual(cosine(r.data[0].embedding, self.ref[0]["embedding"]), 0.9999)
        self.assertEqual(r.usage.prompt_tokens, len(self.ref[0]["ids"]))
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens)

    def test_list_float_equals_base64(self):
        texts = [x["text"] for x in self.ref]
        f = self.client.embeddings.create(model="tiny-bert", input=texts, encoding_format="float")
        # Without encoding_format the client asks for base64 and decodes it (little-endian f32);
        # with an explicit "base64" it hands back the string.
        d = self.client.embeddings.create(model="tiny-bert", input=texts)
        b = self.client.embeddings.create(model="tiny-bert", input=texts, encoding_format="base64")
        self.assertEqual([x.index for x in f.data], list(range(len(texts))))
        for i, x in enumerate(self.ref):
            self.assertGreaterEqual(cosine(f.data[i].embedding, x["embedding"]), 0.9999)
            self.assertEqual(d.data[i].embedding, f.data[i].embedding)  # the same floats exactly
            self.assertIsInstance(b.data[i].embedding, str)
            blob = base64.b64decode(b.data[i].embedding)
            self.assertEqual(list(struct.unpack(f"<{len(blob) // 4}f", blob)), f.data[i].embedding)
        self.assertEqual(f.usage.prompt_tokens, sum(len(x["ids"]) for x in self.ref))

    def test_raw_response_is_base64_by_default_and_names_the_backend(self):
        raw = self.client.embeddings.with_raw_response.create(model="tiny-bert", input="a")
        blob = base64.b64decode(json.loads(raw.text)["data"][0]["embedding"])
        self.assertEqual(len(blob), 32 * 4)
        self.assertEqual(list(struct.unpack("<32f", blob)), raw.parse().data[0].embedding)
        self.assertEqual(raw.headers["x-npu-backend"], "host")
        self.assertNotIn("x-npu-truncated", raw.headers)

    def test_token_ids(self):
        text = self.client.embeddings.create(model="tiny-bert", input=self.ref[1]["text"], encoding_format="float")
        one = self.client.embeddings.create(model="tiny-bert", input=self.ref[1]["ids"], encoding_format="float")
        many = self.client.embeddings.create(model="tiny-bert", input=[self.ref[1]["ids"], self.ref[2]["ids"]])
        for d, (a, b) in enumerate(zip(text.data[0].embedding, one.data[0].embedding)):
            self.assertAlmostEqual(a, b, delta=1e-6, msg=f"dim {d}")
        self.assertEqual(len(many.data), 2)
        self.assertGreaterEqual(cosine(many.data[1].embedding, self.ref[2]["embedding"]), 0.9999)
        self.assertEqual(one.usage.prompt_tokens, len(self.ref[1]["ids"]))

    def test_truncation_is_reported_in_a_header(self):
        raw = self.client.embeddings.with_raw_response.create(model="tiny-bert", input=["short", "word " * 200])
        self.assertEqual(raw.headers["x-npu-truncated"], "1")
        self.assertEqual(len(raw.parse().data), 2)

    def test_errors(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.embeddings.create(model="no-such-model", input="hello")
        self.assertEqual(e.exception.code, "model_not_found")
        with self.assertRaises(openai.BadRequestError):
            self.client.embeddings.create(model="tiny-bert", input=["a", ""])
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.embeddings.create(model="tiny-bert", input="a", dimensions=16)
        self.assertEqual(e.exception.param, "dimensions")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.embeddings.create(model="tiny-bert", input=[2, 9999, 3])
        self.assertEqual(e.exception.code, "invalid_token_id")

    def test_real_model_matches_npu_embed(self):
        if not self.has_real:
            self.skipTest(f"{REAL_MODEL} is not in {default_store()} (`npu model pull {REAL_MODEL}`)")
        texts = ["The cat sits on the mat.", "Embeddings map sentences to vectors.", "Ünïcödé, 日本語 and emoji 🎉"]
        r = self.client.embeddings.create(model=REAL_MODEL, input=texts)
        out = subprocess.run([self.npu, "embed", "--model", REAL_MODEL, "--store", self.store, "--json", *texts],
                             check=True, capture_output=True, text=True)
        cli = json.loads(out.stdout)
        self.assertEqual(len(r.data), len(texts))
        for i, d in enumerate(r.data):
            want = cli["data"][i]["embedding"]
            self.assertEqual(len(d.embedding), 384)
            self.assertGreaterEqual(cosine(d.embedding, want), 0.99999)
            self.assertLess(max(abs(a - b) for a, b in zip(d.embedding, want)), 1e-5)
        self.assertEqual(r.usage.prompt_tokens, cli["usage"]["prompt_tokens"])


if __name__ == "__main__":
    unittest.main()
