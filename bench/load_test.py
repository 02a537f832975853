#!/usr/bin/env python3
"""Load test of `npu serve` (issue 7): N concurrent clients for T seconds on /v1/embeddings, then M
on /v1/chat/completions, over loopback with keep-alive connections. Python stdlib only.

Reports per endpoint: requests, throughput, p50/p90/p99 latency, status counts, and the server's
resident memory (VmRSS of /proc/PID/status, sampled each second) in the first and last 10 s of the
phase. Checks, each failing the run (exit 1): no 5xx, no connection failures, at least one 200,
and RSS growth under --max-rss-growth between the first and last 10 s. 429s (a full queue) are
counted, not failures: they are the server protecting itself.

  # against the real models, starting the server itself
  bench/load_test.py --npu build/npu --store ~/.cache/xdna-engine/models
  # against a server already running (RSS only with --pid)
  bench/load_test.py --url http://127.0.0.1:11435 --pid 12345
  # the ctest smoke run: the tiny fixture models in a temp store
  bench/load_test.py --npu build/npu --fixtures tests/fixtures --embed-clients 4 --chat-clients 4 --duration 8
"""
import argparse
import http.client
import json
import math
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A neural processing unit runs matrix multiplications at low power.",
    "Embeddings map sentences with similar meaning to nearby vectors.",
    "The server keeps models resident and evicts the least recently used.",
    "Rain is expected in the afternoon, clearing by the evening.",
    "She bought three apples, two pears and a loaf of bread.",
    "Latency percentiles say more about a service than its mean.",
    "Bounded queues turn overload into fast refusals instead of slow collapse.",
]
QUESTIONS = [
    "Name a colour.",
    "What is two plus two?",
    "Say hello in French.",
    "Give me one word that rhymes with cat.",
    "What is the capital of Italy?",
]


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list (0 when empty)."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, math.ceil(p / 100.0 * len(sorted_values)) - 1))
    return sorted_values[k]


def read_rss_kib(pid):
    """(VmRSS, RssAnon, RssFile) in KiB: the total, the heap part, the mapped-file part."""
    got = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":")[0]
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    got[key] = int(line.split()[1])
    except OSError:
        return None
    return (got["VmRSS"], got.get("RssAnon", 0), got.get("RssFile", 0)) if "VmRSS" in got else None


class Stats:
    """What the clients saw: latencies, status counts, tokens, a few example failures."""

    def __init__(self):
        self.latencies = []  # seconds, of answered requests
        self.statuses = {}  # HTTP status -> count; "conn-error", "bad-200" (a 200 with a malformed body)
        self.tokens = 0  # chat: completion tokens; embeddings: inputs embedded
        self.errors = []

    def record(self, status, latency=None, tokens=0, error=None):
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if latency is not None:
            self.latencies.append(latency)
        self.tokens += tokens
        if error and len(self.errors) < 5:
            self.errors.append(error)


class Phase:
    """One endpoint under load. The clients run without a break: first a warm-up, until every
    client has had `warmup` answers (the server's worker threads and their allocator arenas reach
    their working size), then `duration` measured seconds; only requests sent in the measured
    window count, and RSS is sampled in it."""

    def __init__(self, name, path, clients, duration, warmup, make_body):
        self.name, self.path, self.clients, self.duration, self.warmup = name, path, clients, duration, warmup
        self.make_body = make_body
        self.lock = threading.Lock()
        self.warm, self.measured = Stats(), Stats()
        self.warm_clients = 0
        self.started = 0.0
        self.measure_start = None  # monotonic time the measured window began
        self.warmup_s = 0.0
        self.rss = []  # (seconds into the window, VmRSS KiB, RssAnon KiB, RssFile KiB)
        self.elapsed = 0.0  # from the window's start to the last answer

    def client_warm(self):
        """Called once per client when it has had its warm-up answers; the last one opens the window."""
        with self.lock:
            self.warm_clients += 1
            if self.warm_clients == self.clients:
                self.measure_start = time.monotonic()
                self.warmup_s = self.measure_start - self.started

    def record(self, sent_at, status, latency=None, tokens=0, error=None):
        with self.lock:
            window_open = self.measure_start is not None and sent_at >= self.measure_start
            (self.measured if window_open else self.warm).record(status, latency, tokens, error)

    def over(self, now):
        with self.lock:
            return self.measure_start is not None and now >= self.measure_start + self.duration


def client_loop(phase, host, port, headers, seed):
    rng = random.Random(seed)
    conn = None
    answered = 0
    if phase.warmup <= 0:
        phase.client_warm()
    while not phase.over(time.monotonic()):
        if conn is None:
            conn = http.client.HTTPConnection(host, port, timeout=300)
        body = json.dumps(phase.make_body(rng))
        t0 = time.monotonic()
        try:
            conn.request("POST", phase.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            phase.record(t0, "conn-error", error=f"{type(e).__name__}: {e}")
            conn.close()
            conn = None
            time.sleep(0.05)
            continue
        latency = time.monotonic() - t0
        tokens = 0
        error = None
        if resp.status == 200:
            try:
                j = json.loads(data)
                tokens = j["usage"]["completion_tokens"] if "choices" in j else len(j["data"])
            except (ValueError, KeyError, TypeError) as e:
                error = f"200 with a malformed body ({e}): {data[:200]!r}"
        else:
            error = f"{resp.status}: {data[:300]!r}"
        phase.record(t0, resp.status if error is None or resp.status != 200 else "bad-200", latency, tokens, error)
        answered += 1
        if answered == phase.warmup:
            phase.client_warm()
        if resp.status == 429:  # the queue is full: back off as Retry-After asks, briefly
            time.sleep(min(1.0, float(resp.getheader("Retry-After", "1") or 1)))
        if resp.getheader("Connection", "").lower() == "close":
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


def run_phase(phase, host, port, headers, pid):
    phase.started = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(phase, host, port, headers, 1000 + i), daemon=True)
               for i in range(phase.clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        now = time.monotonic()
        start = phase.measure_start
        if pid is not None and start is not None and now <= start + phase.duration:
            rss = read_rss_kib(pid)
            if rss is not None:
                phase.rss.append((now - start,) + rss)
        time.sleep(1.0)
    for t in threads:
        t.join()
    phase.elapsed = time.monotonic() - (phase.measure_start or phase.started)


def summarise(phase, window, max_growth):
    m = phase.measured
    lat = sorted(m.latencies)
    n = sum(m.statuses.values())
    ok = m.statuses.get(200, 0)
    s = {
        "endpoint": phase.path,
        "clients": phase.clients,
        "duration_s": round(phase.elapsed, 1),
        "requests": n,
        "ok": ok,
        "throughput_rps": round(ok / phase.elapsed, 2) if phase.elapsed else 0,
        "p50_ms": round(percentile(lat, 50) * 1000, 1),
        "p90_ms": round(percentile(lat, 90) * 1000, 1),
        "p99_ms": round(percentile(lat, 99) * 1000, 1),
        "max_ms": round(lat[-1] * 1000, 1) if lat else 0,
        "statuses": {str(k): v for k, v in sorted(m.statuses.items(), key=lambda kv: str(kv[0]))},
        "count_429": m.statuses.get(429, 0),
        "count_5xx": sum(v for k, v in m.statuses.items() if isinstance(k, int) and k >= 500),
        "conn_errors": m.statuses.get("conn-error", 0),
        "example_errors": m.errors + phase.warm.errors,
        "warmup": {"answers_per_client": phase.warmup, "requests": sum(phase.warm.statuses.values()),
                   "duration_s": round(phase.warmup_s, 1),
                   "statuses": {str(k): v for k, v in phase.warm.statuses.items()}},
    }
    s["tokens_per_s" if phase.name == "chat" else "inputs_per_s"] = round(m.tokens / phase.elapsed, 1) if phase.elapsed else 0
    checks = {"zero_5xx": s["count_5xx"] == 0, "no_connection_errors": s["conn_errors"] == 0,
              "no_malformed_200": m.statuses.get("bad-200", 0) == 0, "some_200": ok > 0,
              "warmup_zero_5xx_and_conn_errors": all(isinstance(k, int) and k < 500 for k in phase.warm.statuses)}
    first = [r for r in phase.rss if r[0] < window]
    last = [r for r in phase.rss if r[0] >= phase.duration - window]
    if first and last:
        def mean_mib(rows, i):
            return sum(r[i] for r in rows) / len(rows) / 1024
        a, b = mean_mib(first, 1), mean_mib(last, 1)
        s["rss_first_mib"], s["rss_last_mib"] = round(a, 1), round(b, 1)
        s["rss_peak_mib"] = round(max(r[1] for r in phase.rss) / 1024, 1)
        s["rss_growth_pct"] = round(100.0 * (b - a) / a, 2)
        # The split says what grew: heap (a leak would be here) or pages of mapped files.
        s["rss_anon_first_last_mib"] = [round(mean_mib(first, 2), 1), round(mean_mib(last, 2), 1)]
        s["rss_file_first_last_mib"] = [round(mean_mib(first, 3), 1), round(mean_mib(last, 3), 1)]
        s["rss_series_mib"] = [[round(r[0], 1), round(r[1] / 1024, 1), round(r[2] / 1024, 1)] for r in phase.rss]
        checks["rss_growth_under_%g_pct" % (100 * max_growth)] = (b - a) / a < max_growth
    s["checks"] = checks
    return s


def write_manifest(model_dir, name, family, fmt, precision):
    files = []
    for root, _, names in os.walk(model_dir):
        for n in sorted(names):
            p = os.path.join(root, n)
            files.append({"name": os.path.relpath(p, model_dir), "size_bytes": os.path.getsize(p), "sha256": ""})
    manifest = {"schema": 1, "name": name, "family": family, "format": fmt, "precision": precision,
                "source": {"registry": "pypi", "packages": [{"name": "fixture", "version": "0"}]},
                "files": files, "size_bytes": sum(f["size_bytes"] for f in files), "created": int(time.time())}
    with open(os.path.join(model_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def fixture_store(fixtures, tmp):
    """A store of the repository's tiny random fixtures: tiny-bert (embeddings), tiny-chat (LLM)."""
    store = os.path.join(tmp, "models")
    for name, src, family in [("tiny-bert", "encoders/tiny-bert-e5", "bert"), ("tiny-chat", "llm/tiny-llama-chat", "llama")]:
        dst = os.path.join(store, name)
        shutil.copytree(os.path.join(fixtures, src), dst, ignore=shutil.ignore_patterns("reference.json"))
        write_manifest(dst, name, family, "safetensors", "f32")
    return store


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(npu, store, args, log_path):
    port = free_port()
    cmd = [npu, "serve", "--port", str(port), "--store", store, "--quiet"] + args
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"npu serve exited with {proc.returncode}; its log: {log_path}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"npu serve did not answer /health within 60 s; its log: {log_path}")


def warm_up(host, port, headers, path, body):
    """One request first, so model loading is not in the measured window (nor in its RSS)."""
    c = http.client.HTTPConnection(host, port, timeout=600)
    c.request("POST", path, body=json.dumps(body), headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"warm-up {path} got {r.status}: {data[:300]!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npu", help="the npu binary: start `npu serve` on a free port")
    ap.add_argument("--url", help="an already running server instead, e.g. http://127.0.0.1:11435")
    ap.add_argument("--pid", type=int, help="with --url: the server's process id, for RSS")
    ap.add_argument("--store", help="model store for the started server (default: npu's own)")
    ap.add_argument("--fixtures", help="tests/fixtures: serve the tiny fixture models from a temp store")
    ap.add_argument("--embed-model", default="all-minilm-l6-v2")
    ap.add_argument("--chat-model", default="gemma3-270m")
    ap.add_argument("--embed-clients", type=int, default=16)
    ap.add_argument("--chat-clients", type=int, default=4)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of each phase")
    ap.add_argument("--window", type=float, default=10.0, help="seconds at each end of a phase compared for RSS")
    ap.add_argument("--max-tokens", type=int, default=16, help="chat max_tokens")
    ap.add_argument("--warmup-requests", type=int, default=2,
                    help="answers each client gets before the measured window opens (the clients do not pause)")
    ap.add_argument("--max-rss-growth", type=float, default=0.05)
    ap.add_argument("--api-key")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `npu serve` argument (repeatable)")
    ap.add_argument("--skip", choices=["embeddings", "chat"], action="append", default=[])
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    if bool(a.npu) == bool(a.url):
        ap.error("give exactly one of --npu and --url")
    window = min(a.window, a.duration / 2)

    tmp = tempfile.mkdtemp(prefix="xdna-load-")
    proc = None
    try:
        if a.npu:
            store = a.store
            if a.fixtures:
                store = fixture_store(a.fixtures, tmp)
                a.embed_model, a.chat_model = "tiny-bert", "tiny-chat"
            if store is None:
                cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
                store = os.path.join(cache, "xdna-engine", "models")
            proc, port = start_server(a.npu, store, a.serve_arg, os.path.join(tmp, "serve.log"))
            host, pid = "127.0.0.1", proc.pid
        else:
            u = urllib.parse.urlparse(a.url)
            host, port, pid = u.hostname, u.port or 80, a.pid
        headers = {"Content-Type": "application/json"}
        if a.api_key:
            headers["Authorization"] = "Bearer " + a.api_key

        def embed_body(rng):
            return {"model": a.embed_model, "input": rng.choice(SENTENCES)}

        def chat_body(rng):
            return {"model": a.chat_model, "messages": [{"role": "user", "content": rng.choice(QUESTIONS)}],
                    "max_tokens": a.max_tokens, "temperature": 0.7, "seed": rng.randrange(1 << 31)}

        phases = []
        if "embeddings" not in a.skip and a.embed_clients > 0:
            phases.append(Phase("embeddings", "/v1/embeddings", a.embed_clients, a.duration, a.warmup_requests, embed_body))
        if "chat" not in a.skip and a.chat_clients > 0:
            phases.append(Phase("chat", "/v1/chat/completions", a.chat_clients, a.duration, a.warmup_requests, chat_body))
        results = {"machine": {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()},
                   "server_pid": pid, "models": {"embeddings": a.embed_model, "chat": a.chat_model}, "phases": {}}
        failed = []
        for ph in phases:
            warm_up(host, port, headers, ph.path, ph.make_body(random.Random(0)))  # loads the model
            print(f"{ph.name}: {ph.clients} clients on {ph.path}: warm-up of {ph.warmup} answers each, then "
                  f"{ph.duration:g} s measured ...", flush=True)
            run_phase(ph, host, port, headers, pid)
            s = summarise(ph, window, a.max_rss_growth)
            results["phases"][ph.name] = s
            print(f"  warm-up: {s['warmup']['requests']} requests in {s['warmup']['duration_s']} s", flush=True)
            rss = (f"RSS {s['rss_first_mib']} -> {s['rss_last_mib']} MiB ({s['rss_growth_pct']:+.2f}%; anon "
                   f"{s['rss_anon_first_last_mib'][0]} -> {s['rss_anon_first_last_mib'][1]}, file "
                   f"{s['rss_file_first_last_mib'][0]} -> {s['rss_file_first_last_mib'][1]})"
                   if "rss_growth_pct" in s else "RSS not sampled")
            rate = f"{s['tokens_per_s']} tokens/s" if "tokens_per_s" in s else f"{s['inputs_per_s']} inputs/s"
            print(f"  {s['requests']} requests, {s['throughput_rps']} req/s ({rate}); latency p50 {s['p50_ms']} ms, "
                  f"p90 {s['p90_ms']} ms, p99 {s['p99_ms']} ms, max {s['max_ms']} ms", flush=True)
            print(f"  statuses {s['statuses']}; 429: {s['count_429']}; 5xx: {s['count_5xx']}; {rss}", flush=True)
            for e in s["example_errors"]:
                print(f"  e.g. {e}", flush=True)
            for name, ok in s["checks"].items():
                print(f"  check {name}: {'ok' if ok else 'FAILED'}", flush=True)
                if not ok:
                    failed.append(f"{ph.name}.{name}")
        results["machine"]["load_avg_at_end"] = os.getloadavg()
        if proc is not None and proc.poll() is not None:
            failed.append(f"server exited with {proc.returncode} during the test")
        results["failed"] = failed
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=2)
        print("PASS" if not failed else "FAIL: " + ", ".join(failed), flush=True)
        return 1 if failed else 0
    except RuntimeError as e:
        print(f"load_test: {e}", file=sys.stderr)
        log = os.path.join(tmp, "serve.log")
        if os.path.exists(log):
            with open(log, errors="replace") as f:
                sys.stderr.write(f.read()[-3000:])
        return 2
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
