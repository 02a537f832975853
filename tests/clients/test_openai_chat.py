"""`npu serve`'s POST /v1/chat/completions and /v1/completions through the official openai client.

Serves a temp store holding the tiny chat LLM fixture (tests/fixtures/llm/tiny-llama-chat, whose
greedy continuations transformers computed: reference.json), streams a chat completion and gets
non-streaming ones. Run through run_client_tests.py, which sets XDNA_NPU_BINARY.
"""
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import openai

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "fixtures", "llm", "tiny-llama-chat")


def add_fixture_model(store: str, name: str) -> None:
    """Copies the fixture into the store with a manifest, as `npu model pull` would leave it."""
    dst = os.path.join(store, name)
    shutil.copytree(FIXTURE, dst, ignore=shutil.ignore_patterns("reference.json"))
    files = [{"name": n, "size_bytes": os.path.getsize(os.path.join(dst, n)), "sha256": ""} for n in sorted(os.listdir(dst))]
    manifest = {"schema": 1, "name": name, "family": "llama", "format": "safetensors", "precision": "f32",
                "source": {"registry": "pypi", "packages": [{"name": "fixture", "version": "0"}]},
                "files": files, "size_bytes": sum(f["size_bytes"] for f in files), "created": int(time.time())}
    with open(os.path.join(dst, "manifest.json"), "w") as f:
        json.dump(manifest, f)


class OpenAIChat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.npu = os.environ["XDNA_NPU_BINARY"]
        cls.tmp = tempfile.mkdtemp(prefix="xdna-client-chat-")
        cls.store = os.path.join(cls.tmp, "models")
        os.makedirs(cls.store)
        add_fixture_model(cls.store, "tiny-chat")
        with open(os.path.join(FIXTURE, "reference.json")) as f:
            cls.cases = json.load(f)["cases"]
        cls.server = subprocess.Popen([cls.npu, "serve", "--port", "0", "--store", cls.store],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ready, _, _ = select.select([cls.server.stdout], [], [], 60)
        line = cls.server.stdout.readline() if ready else ""
        if "listening on http://" not in line:
            cls.server.kill()
            raise RuntimeError(f"npu serve did not start: {line!r}")
        cls.base = line.split("listening on ")[1].split()[0]
        cls.client = openai.OpenAI(base_url=cls.base + "/v1", api_key="not-needed", max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.server.send_signal(signal.SIGTERM)
        try:
            cls.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cls.server.kill()
        cls.server.stdout.close()
        shutil.rmtree(cls.tmp)

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
