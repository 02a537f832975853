"""What the client tests share: `npu serve` over a temp store on a free port, and the manifests
`npu model pull` leaves in a store. Imported by the test_*.py here (run_client_tests.py runs them
with this directory as the working directory and sets XDNA_NPU_BINARY).
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


def npu_binary() -> str:
    return os.environ["XDNA_NPU_BINARY"]


def default_store() -> str:
    """The store `npu` uses by default (models/model_store.h: default_store_dir)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "xdna-engine", "models")


def make_store(prefix: str) -> tuple:
    """A fresh temp directory and the empty store inside it: (tmp, store)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    store = os.path.join(tmp, "models")
    os.makedirs(store)
    return tmp, store


def link_default_model(store: str, name: str) -> bool:
    """Links `name` from the default store into `store` when it has been pulled; whether it was."""
    real = os.path.join(default_store(), name)
    if not os.path.exists(os.path.join(real, "manifest.json")):
        return False
    os.symlink(real, os.path.join(store, name))
    return True


def write_manifest(model_dir: str, name: str, family: str, fmt: str, precision: str, files: list) -> None:
    manifest = {"schema": 1, "name": name, "family": family, "format": fmt, "precision": precision,
                "source": {"registry": "pypi", "packages": [{"name": "fixture", "version": "0"}]},
                "files": files, "size_bytes": sum(f["size_bytes"] for f in files), "created": int(time.time())}
    with open(os.path.join(model_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def add_fixture_model(store: str, name: str, fixture: str, family: str) -> None:
    """Copies a safetensors fixture (less its reference.json) into the store with a manifest."""
    dst = os.path.join(store, name)
    shutil.copytree(fixture, dst, ignore=shutil.ignore_patterns("reference.json"))
    files = []
    for root, _, names in os.walk(dst):
        for n in sorted(names):
            path = os.path.join(root, n)
            files.append({"name": os.path.relpath(path, dst), "size_bytes": os.path.getsize(path), "sha256": ""})
    write_manifest(dst, name, family, "safetensors", "f32", files)


class NpuServer:
    """`npu serve --port 0` on `store`; `base` is its URL, `client` an openai client for it."""

    def __init__(self, store: str):
        self.proc = subprocess.Popen([npu_binary(), "serve", "--port", "0", "--store", store],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # "npu serve: listening on http://127.0.0.1:PORT (...)"
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if "listening on http://" not in line:
            self.proc.kill()
            raise RuntimeError(f"npu serve did not start: {line!r}")
        self.base = line.split("listening on ")[1].split()[0]
        self.client = openai.OpenAI(base_url=self.base + "/v1", api_key="not-needed", max_retries=0, timeout=120)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc.stdout.close()


class ServedStoreTest(unittest.TestCase):
    """A test class with one `npu serve` over its own temp store for all its tests: subclasses
    fill the store in the classmethod fill_store(store) and query cls.client (or cls.server.base)."""

    store_prefix = "xdna-client-"

    @classmethod
    def fill_store(cls, store: str) -> None:
        pass

    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.store = make_store(cls.store_prefix)
        cls.fill_store(cls.store)
        cls.server = NpuServer(cls.store)
        cls.client = cls.server.client

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp)
