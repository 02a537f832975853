"""`npu serve`'s POST /v1/chat/completions and /v1/completions through the official openai client.

Serves a temp store holding the tiny chat LLM fixture (tests/fixtures/llm/tiny-llama-chat, whose
greedy continuations transformers computed: reference.json), streams a chat completion and gets
non-streaming ones. Run through run_client_tests.py, which sets XDNA_NPU_BINARY.
"""
import json
import os
import unittest

import openai
from npu_server import ServedStoreTest, add_fixture_model

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "fixtures", "llm", "tiny-llama-chat")


class OpenAIChat(ServedStoreTest):
    store_prefix = "xdna-client-chat-"

    @classmethod
    def fill_store(cls, store):
        add_fixture_model(store, "tiny-chat", FIXTURE, "llama")
        with open(os.path.join(FIXTURE, "reference.json")) as f:
            cls.cases = json.load(f)["cases"]

    def chat_case(self):
        return next(c for c in self.cases if c["kind"] == "chat")

    def test_chat_non_streaming_equals_transformers_greedy(self):
        c = self.chat_case()
        r = self.client.chat.completions.create(model="tiny-chat", messages=c["messages"], temperature=0,
                                                max_tokens=24)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, "tiny-chat")
        self.assertEqual(len(r.choices), 1)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertEqual(r.choices[0].message.content, c["greedy_text"])
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.prompt_tokens, len(c["prompt_ids"]))
        self.assertEqual(r.usage.completion_tokens, 24)
        self.assertEqual(r.usage.total_tokens, len(c["prompt_ids"]) + 24)

    def test_chat_streaming(self):
        c = self.chat_case()
        stream = self.client.chat.completions.create(model="tiny-chat", messages=c["messages"], temperature=0,
                                                     max_completion_tokens=24, stream=True,
                                                     stream_options={"include_usage": True})
        chunks = list(stream)
        self.assertGreaterEqual(len(chunks), 4)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual(len({ch.id for ch in chunks}), 1)
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, c["greedy_text"])
        finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        self.assertEqual(finishes, ["length"])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 24)

    def test_streaming_arrives_in_pieces(self):
        """Chunks come as they are generated, not all at once when generation ends."""
        stream = self.client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "Hi"}],
                                                     temperature=0, max_tokens=64, stream=True)
        contents = [ch.choices[0].delta.content for ch in stream if ch.choices and ch.choices[0].delta.content]
        self.assertGreater(len(contents), 10)

    def test_completions_with_stop_and_seed(self):
        c = next(c for c in self.cases if c["kind"] == "plain")
        full = c["greedy_text"]
        r = self.client.completions.create(model="tiny-chat", prompt=c["prompt"], temperature=0, max_tokens=24)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.choices[0].text, full)
        stop = full[full.index("Q")]
        s = self.client.completions.create(model="tiny-chat", prompt=c["prompt"], temperature=0, max_tokens=24,
                                           stop=[stop])
        self.assertEqual(s.choices[0].text, full[:full.index(stop)])
        self.assertEqual(s.choices[0].finish_reason, "stop")
        a = self.client.completions.create(model="tiny-chat", prompt="Hello", seed=3, max_tokens=10, temperature=1)
        b = self.client.completions.create(model="tiny-chat", prompt="Hello", seed=3, max_tokens=10, temperature=1)
        self.assertEqual(a.choices[0].text, b.choices[0].text)

    def test_errors(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
        self.assertEqual(e.exception.code, "model_not_found")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "x"}], n=2)
        self.assertEqual(e.exception.param, "n")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="tiny-chat", prompt="word " * 300)
        self.assertEqual(e.exception.code, "context_length_exceeded")
        self.assertIn("128", str(e.exception))


if __name__ == "__main__":
    unittest.main()
