"""`npu serve`'s Ollama API (/api/*) through the official ollama Python client.

Serves a temp store holding the tiny chat LLM fixture (tests/fixtures/llm/tiny-llama-chat, whose
greedy continuations transformers computed: reference.json) and the tiny BERT embedder
(tests/fixtures/encoders/tiny-bert-e5, with sentence-transformers' vectors in reference.json).
Run through run_client_tests.py, which sets XDNA_NPU_BINARY.
"""
import json
import math
import os
import unittest

import ollama
from npu_server import ServedStoreTest, add_fixture_model

HERE = os.path.dirname(os.path.abspath(__file__))
LLM = os.path.join(HERE, "..", "fixtures", "llm", "tiny-llama-chat")
BERT = os.path.join(HERE, "..", "fixtures", "encoders", "tiny-bert-e5")
GREEDY = {"temperature": 0, "num_predict": 24}


class OllamaClient(ServedStoreTest):
    store_prefix = "xdna-client-ollama-"

    @classmethod
    def fill_store(cls, store):
        add_fixture_model(store, "tiny-chat", LLM, "llama")
        add_fixture_model(store, "tiny-bert", BERT, "bert")
        with open(os.path.join(LLM, "reference.json")) as f:
            cls.cases = json.load(f)["cases"]
        with open(os.path.join(BERT, "reference.json")) as f:
            cls.embed_ref = json.load(f)["inputs"]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.ollama = ollama.Client(host=cls.server.base, timeout=120)

    def chat_case(self, i=0):
        return [c for c in self.cases if c["kind"] == "chat"][i]

    def test_list(self):
        models = {m.model: m for m in self.ollama.list().models}
        self.assertEqual(set(models), {"tiny-chat:latest", "tiny-bert:latest"})
        bert = models["tiny-bert:latest"]
        self.assertEqual(bert.details.family, "bert")
        self.assertEqual(bert.details.format, "safetensors")
        self.assertEqual(bert.details.quantization_level, "F32")
        self.assertGreater(bert.size, os.path.getsize(os.path.join(BERT, "model.safetensors")))
        self.assertEqual(len(bert.digest), 64)
        self.assertIsNotNone(bert.modified_at.year)

    def test_show(self):
        s = self.ollama.show("tiny-chat")
        self.assertEqual(s.capabilities, ["completion"])
        self.assertEqual(s.details.family, "llama")
        self.assertEqual(s.modelinfo["llama.context_length"], 128)
        self.assertIn("<|im_start|>", s.template)
        self.assertEqual(self.ollama.show("tiny-bert:latest").capabilities, ["embedding"])
        with self.assertRaises(ollama.ResponseError) as e:
            self.ollama.show("tiny-chat:7b")
        self.assertEqual(e.exception.status_code, 404)

    def test_generate_not_streamed_equals_transformers_greedy(self):
        c = self.chat_case(0)  # "Hi there" through the chat template
        r = self.ollama.generate(model="tiny-chat", prompt=c["messages"][0]["content"], options=GREEDY)
        self.assertTrue(r.done)
        self.assertEqual(r.done_reason, "length")
        self.assertEqual(r.response, c["greedy_text"])
        self.assertEqual(r.prompt_eval_count, len(c["prompt_ids"]))
        self.assertEqual(r.eval_count, 24)
        self.assertGreater(r.eval_duration, 0)
        self.assertGreaterEqual(r.total_duration, r.eval_duration + r.prompt_eval_duration)
        self.assertEqual(list(r.context), c["prompt_ids"] + c["greedy_ids"])

    def test_generate_streamed(self):
        c = self.chat_case(0)
        parts = list(self.ollama.generate(model="tiny-chat:latest", prompt=c["messages"][0]["content"],
                                          options=GREEDY, stream=True))
        self.assertGreater(len(parts), 5)
        self.assertEqual([p.done for p in parts], [False] * (len(parts) - 1) + [True])
        self.assertEqual("".join(p.response for p in parts), c["greedy_text"])
        self.assertEqual(parts[-1].eval_count, 24)
        self.assertEqual(parts[-1].prompt_eval_count, len(c["prompt_ids"]))

    def test_generate_seed_is_deterministic(self):
        opts = {"seed": 11, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "num_predict": 12}
        a = self.ollama.generate(model="tiny-chat", prompt="Hello", options=opts)
        b = self.ollama.generate(model="tiny-chat", prompt="Hello", options=opts)
        self.assertEqual(a.response, b.response)
        self.assertEqual(a.eval_count, 12)
        self.assertNotEqual(a.response, self.ollama.generate(model="tiny-chat", prompt="Hello",
                                                             options=dict(opts, seed=12)).response)

    def test_chat_streamed(self):
        c = self.chat_case(1)  # system + multi-turn
        parts = list(self.ollama.chat(model="tiny-chat", messages=c["messages"], options=GREEDY, stream=True))
        self.assertTrue(all(p.message.role == "assistant" for p in parts))
        self.assertEqual("".join(p.message.content for p in parts), c["greedy_text"])
        self.assertTrue(parts[-1].done)
        self.assertEqual(parts[-1].done_reason, "length")
        self.assertEqual(parts[-1].eval_count, 24)
        r = self.ollama.chat(model="tiny-chat", messages=c["messages"], options=GREEDY)
        self.assertEqual(r.message.content, c["greedy_text"])

    def test_unknown_model_and_refused_features(self):
        with self.assertRaises(ollama.ResponseError) as e:
            self.ollama.chat(model="no-such-model", messages=[{"role": "user", "content": "x"}])
        self.assertEqual(e.exception.status_code, 404)
        self.assertIn("no-such-model", e.exception.error)
        with self.assertRaises(ollama.ResponseError) as e:
            self.ollama.generate(model="tiny-chat", prompt="x", format="json")
        self.assertEqual(e.exception.status_code, 400)
        self.assertIn("format", e.exception.error)

    def test_embed(self):
        texts = [self.embed_ref[0]["text"], self.embed_ref[1]["text"]]
        r = self.ollama.embed(model="tiny-bert", input=texts)
        self.assertEqual(len(r.embeddings), 2)
        for vec, ref in zip(r.embeddings, self.embed_ref[:2]):
            self.assertEqual(len(vec), 32)
            self.assertAlmostEqual(math.sqrt(sum(x * x for x in vec)), 1.0, places=5)
            cos = sum(a * b for a, b in zip(vec, ref["embedding"]))
            self.assertGreater(cos, 0.9999)
        self.assertEqual(r.prompt_eval_count, len(self.embed_ref[0]["ids"]) + len(self.embed_ref[1]["ids"]))
        legacy = self.ollama.embeddings(model="tiny-bert", prompt=texts[0])
        self.assertEqual(len(legacy.embedding), 32)
        for a, b in zip(legacy.embedding, r.embeddings[0]):
            self.assertAlmostEqual(a, b, places=5)

    def test_ps_after_use(self):
        self.ollama.embed(model="tiny-bert", input="a")
        self.ollama.generate(model="tiny-chat", prompt="Hi", options={"num_predict": 1})
        models = {m.model: m for m in self.ollama.ps().models}
        self.assertIn("tiny-chat:latest", models)
        self.assertIn("tiny-bert:latest", models)
        self.assertGreater(models["tiny-chat:latest"].size, 0)
        self.assertEqual(models["tiny-chat:latest"].size_vram, 0)
        self.assertEqual(models["tiny-chat:latest"].details.family, "llama")
        raw = self.ollama._client.get("/api/ps").json()["models"]
        self.assertTrue(all(m["device"] in ("host", "npu-sim", "npu") for m in raw))
        self.assertEqual({m["kind"] for m in raw}, {"llm", "embedding"})


if __name__ == "__main__":
    unittest.main()
