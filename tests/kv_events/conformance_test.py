"""KV-event conformance: banyand's event stream, decoded as a router decodes vLLM's, rebuilds the
daemon's set of cached blocks exactly (docs/kv_events.md).

  conformance_test.py BANYAND

Starts banyand (CPU backend, bundled model, a KV cache small enough to evict and preempt, two
tenants) with events on loopback ports and /debug/kv_blocks on, subscribes, drives workloads
(shared prefixes, the same prompt from two tenants, n-way sampling, memory pressure, preemption,
cancelled streams), and at every quiescent point compares the subscriber's set of block hashes
with the daemon's own (/debug/kv_blocks, recomputed from the prefix tree's tokens). Then: a late
subscriber catches up through replay; a stalled subscriber neither stalls the daemon nor stays
wrong (the PUB socket drops for it, it sees the gap and replays); a malformed replay request is
answered with the end marker and counted; the map encoding decodes the same; bad configurations
fail at start-up naming the field.
"""

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import zmq

from subscriber import END_SEQ, Subscriber, wait_for

BANYAND = sys.argv[1]
CHUNK = 16
KEYS = {"alice": "sk-alice-kv-events", "bob": "sk-bob-kv-events"}

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(x):
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def namespace_seed(ns):
    data = ns.encode()
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return mix64(h ^ ((len(data) * GOLDEN) & M64))


def block_hash(parent, tokens):
    h = mix64(parent ^ ((len(tokens) * GOLDEN) & M64))
    for t in tokens:
        h = mix64((h + GOLDEN + (t & 0xFFFFFFFF)) & M64)
    return h


def tenant_namespace(tenant):  # server/common/validation.cc CacheNamespace, no user, no cache_salt
    return f"t{len(tenant.encode())}:{tenant}|u0:|s0:"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, workdir, kv_config, extra=(), expect_fail=False):
        self.port = free_port()
        tenants = os.path.join(workdir, "tenants.json")
        with open(tenants, "w") as f:
            json.dump([{"name": n, "keys": [k]} for n, k in KEYS.items()], f)
        args = [BANYAND, "--backend", "cpu", "--http-port", str(self.port), "--grpc-port", "0",
                "--tenants", tenants, "--chunk-size", str(CHUNK),
                "--kv-events-config", json.dumps(kv_config), *extra]
        self.log = open(os.path.join(workdir, f"banyand-{self.port}.log"), "w+")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        if expect_fail:
            return
        wait_for(lambda: self.ready(), "banyand /ready", 300)

    def ready(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"banyand exited with {self.proc.returncode}:\n{self.output()}")
        try:
            return self.get("/ready")[0] == 200
        except OSError:
            return False

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def request(self, method, path, body=None, key=KEYS["alice"], timeout=300):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Authorization": f"Bearer {key}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        c.request(method, path, json.dumps(body) if body is not None else None, headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def get(self, path):
        return self.request("GET", path)

    def complete(self, prompt, max_tokens=32, key=KEYS["alice"], **params):
        body = {"model": "stories260K", "prompt": prompt, "max_tokens": max_tokens,
                "temperature": 0.0, **params}
        status, data = self.request("POST", "/v1/completions", body, key)
        assert status == 200, f"completion answered {status}: {data[:300]}"
        return json.loads(data)

    def metric(self, name):
        status, data = self.get("/metrics")
        assert status == 200
        total = 0.0
        found = False
        for line in data.decode().splitlines():
            m = re.match(re.escape(name) + r"(\{[^}]*\})? (\S+)$", line)
            if m:
                total += float(m.group(2))
                found = True
        assert found, f"{name} not in /metrics"
        return total

    def blocks(self):
        status, data = self.get("/debug/kv_blocks")
        assert status == 200, f"/debug/kv_blocks answered {status}: {data[:300]}"
        return json.loads(data)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def parallel(fns):
    errors = []

    def run(fn):
        try:
            fn()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def quiescent(d):
    wait_for(lambda: d.metric("banyan_requests_running") == 0
             and d.metric("banyan_requests_waiting") == 0, "no request running")


def check_exact(d, sub, what):
    """At a quiescent point: the subscriber's set equals the daemon's."""
    quiescent(d)
    state = {}

    def same():
        state["daemon"] = set(d.blocks()["blocks"])
        state["sub"] = sub.snapshot()
        return state["daemon"] == state["sub"]

    try:
        wait_for(same, f"the subscriber's blocks to match the daemon's after {what}", 240)
    except AssertionError:
        only_d = len(state["daemon"] - state["sub"])
        only_s = len(state["sub"] - state["daemon"])
        raise AssertionError(f"after {what}: {only_d} blocks only in the daemon, {only_s} only "
                             f"in the subscriber (of {len(state['daemon'])}); subscriber at "
                             f"batch {sub.next_seq} of "
                             f"{int(d.metric('banyan_kv_events_batches_published_total'))}, "
                             f"{sub.gaps} gaps, errors {sub.errors[:3]}")
    assert not sub.errors, f"after {what}: {sub.errors[:5]}"
    print(f"ok   {what}: {len(state['daemon'])} blocks, subscriber exact "
          f"({sub.batches} batches, {sub.removed} removed, {sub.gaps} gaps replayed)", flush=True)
    return state["daemon"]


STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the "
         "park with her friends. One day, she saw a big red ball under a tree. ")
ENDINGS = ["She ran to get it.", "Her mom said no.", "A dog came by.", "It was very shiny.",
           "The sun was hot.", "Tom wanted it too."]
WORDS = ("cat dog sun tree ball park girl boy happy sad big small red blue jump run play eat "
         "sleep sing").split()


def distinct_prompt(i, words=60):
    return " ".join(WORDS[(i * 7 + j * (i % 5 + 1)) % len(WORDS)] for j in range(words))


def cancelled_stream(d, prompt):
    """Starts a streamed completion, reads its first event, and hangs up."""
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    body = {"model": "stories260K", "prompt": prompt, "max_tokens": 300, "stream": True,
            "temperature": 1.0}
    c.request("POST", "/v1/completions", json.dumps(body),
              {"Content-Type": "application/json", "Authorization": f"Bearer {KEYS['alice']}"})
    r = c.getresponse()
    assert r.status == 200
    r.fp.readline()
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()


def main():
    workdir = tempfile.mkdtemp(prefix="kv-events-")
    pub, replay = free_port(), free_port()
    config = {"enable_kv_cache_events": True, "publisher": "zmq",
              "endpoint": f"tcp://127.0.0.1:{pub}", "bind": True,
              "replay_endpoint": f"tcp://127.0.0.1:{replay}", "topic": "kv-events",
              "buffer_steps": 1000000, "hwm": 16}
    d = Daemon(workdir, config, ["--kv-memory", "1MiB", "--debug-kv-blocks", "on",
                                 "--max-batch", "16"])
    try:
        run(d, pub, replay)
    except BaseException:
        print(d.output()[-4000:], file=sys.stderr)
        raise
    finally:
        d.stop()
    run_stalled(workdir)
    run_bad_configs(workdir)
    shutil.rmtree(workdir, ignore_errors=True)  # kept (with the daemons' logs) when a check fails
    print("PASS")


def run(d, pub, replay):
    pub_ep, replay_ep = f"tcp://127.0.0.1:{pub}", f"tcp://127.0.0.1:{replay}"
    sub = Subscriber(pub_ep, replay_ep, topic=b"kv-events")
    time.sleep(0.2)  # not needed for exactness (gaps are replayed), only to see live traffic

    # 1. Shared prefixes, concurrently.
    parallel([lambda e=e: d.complete(STORY + e, 24) for e in ENDINGS])
    held = check_exact(d, sub, "shared prefixes")
    assert len(held) > 0

    # 2. The same prompt from two tenants: the same tokens, other hashes, each as documented.
    d.complete(STORY, 8, key=KEYS["alice"])
    d.complete(STORY, 8, key=KEYS["bob"])
    check_exact(d, sub, "two tenants")
    firsts = {}
    for h, parent, tokens, size in sub.stored:
        assert size == CHUNK
        if parent is None:
            firsts.setdefault(tuple(tokens), set()).add(h)
    seeds = {namespace_seed(tenant_namespace(t)) for t in KEYS}
    shared = [hs for toks, hs in firsts.items() if len(hs) == 2]
    assert shared, "no first block stored by both tenants with the same tokens"
    for toks, hs in firsts.items():
        assert hs <= {block_hash(s, list(toks)) for s in seeds}, "a first block's hash is not " \
            "BlockHash(NamespaceSeed(tenant namespace), tokens)"
    for h, parent, tokens, size in sub.stored:
        if parent is not None:
            assert h == block_hash(parent, tokens), "a block's hash does not chain from its parent"
    print("ok   hashes: chained from the tenant's namespace seed; tenants' identical prefixes differ")

    # 3. n-way sampling.
    parallel([lambda i=i: d.complete(STORY + ENDINGS[i], 48, n=4, temperature=1.0, seed=i)
              for i in range(3)])
    check_exact(d, sub, "n-way sampling")

    # 4. Memory pressure: more distinct prompts than the cache holds.
    removed = sub.removed
    for wave in range(3):
        parallel([lambda i=i: d.complete(distinct_prompt(wave * 8 + i), 16) for i in range(8)])
    check_exact(d, sub, "memory pressure")
    assert sub.removed > removed, "no block was evicted under memory pressure"

    # 5. Preemption: long generations that do not all fit.
    preempted = d.metric("vllm:num_preemptions_total")
    parallel([lambda i=i: d.complete(distinct_prompt(100 + i, 40), 220, temperature=1.0, seed=i,
                                     ignore_eos=True)
              for i in range(12)])
    check_exact(d, sub, "preemption")
    assert d.metric("vllm:num_preemptions_total") > preempted, "the load preempted nothing"

    # 6. Cancelled streams.
    parallel([lambda i=i: cancelled_stream(d, distinct_prompt(200 + i, 50)) for i in range(4)])
    check_exact(d, sub, "cancelled streams")

    # 7. A late subscriber catches up through replay, then follows live.
    late = Subscriber(pub_ep, replay_ep, topic=b"kv-events")
    late.catch_up()
    assert late.replayed > 0
    check_exact(d, late, "a late subscriber's replay")
    d.complete(STORY + "The end.", 24)
    check_exact(d, late, "the late subscriber, live")
    late.close()

    # 9. A malformed replay request: the end marker only, counted; replay still works.
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 30000)
    dealer.connect(replay_ep)
    dealer.send_multipart([b"", b"abc"])
    assert dealer.recv_multipart() == [b"", END_SEQ, b""]
    dealer.close(linger=0)
    wait_for(lambda: d.metric("banyan_kv_events_replay_bad_requests_total") == 1,
             "the malformed replay request counted")
    sub.catch_up()
    check_exact(d, sub, "a malformed replay request")
    sub.close()
    print(f"ok   published {int(d.metric('banyan_kv_events_batches_published_total'))} batches, "
          f"{int(d.metric('banyan_kv_events_events_published_total'))} events, "
          f"{int(d.metric('vllm:num_preemptions_total'))} preemptions")


def run_stalled(workdir):
    """vLLM's newer map encoding over ipc:// (bounded kernel buffers, unlike loopback TCP's
    autotuned ones), with speculative decoding: a subscriber that stops reading neither stalls
    the daemon nor stays wrong. The PUB socket drops for it; once it reads, it sees the gap and
    replays."""
    pub_ep = f"ipc://{workdir}/kv-events.pub"
    replay_ep = f"ipc://{workdir}/kv-events.replay"
    d = Daemon(workdir, {"enable_kv_cache_events": True, "endpoint": pub_ep,
                         "replay_endpoint": replay_ep, "event_encoding": "map", "hwm": 16},
               ["--kv-memory", "2MiB", "--debug-kv-blocks", "on", "--max-batch", "32",
                "--speculative", "lookup"])
    try:
        sub = Subscriber(pub_ep, replay_ep)
        slow = Subscriber(pub_ep, replay_ep, rcvhwm=1, rcvbuf=1024, read=False)
        parallel([lambda e=e: d.complete(STORY + e, 24) for e in ENDINGS[:3]])
        sub.catch_up()
        check_exact(d, sub, "map encoding")
        # Speculation (prompt lookup): a repeated greedy request drafts its earlier continuation;
        # candidates are placed in the tree and the rejected ones cut off again.
        drafts = d.metric("vllm:spec_decode_num_drafts_total")
        for _ in range(3):
            d.complete(STORY + ENDINGS[4], 64, ignore_eos=True)
            d.complete(STORY + ENDINGS[4] + " Then", 64, ignore_eos=True)
        check_exact(d, sub, "speculative decoding")
        assert d.metric("vllm:spec_decode_num_drafts_total") > drafts, "nothing was speculated"
        slow.catch_up()
        for wave in range(6):
            parallel([lambda i=i: d.complete(distinct_prompt(1000 + wave * 50 + i, 150), 4)
                      for i in range(50)])
        check_exact(d, sub, "map encoding, a burst beside a stalled subscriber")
        slow.reading.set()
        # New prompts store new blocks: a live batch after the burst shows the gap. The PUB socket
        # may drop the first live batches too, while the subscriber still drains what its socket
        # held (on a loaded machine the request can finish first), so new prompts keep coming
        # until it has seen one and replayed up to the last batch published (a state, not a time).
        live = iter(range(5000, 1 << 30))

        def caught_up():
            published = d.metric("banyan_kv_events_batches_published_total")
            if slow.gaps >= 1 and slow.next_seq == published:
                return True
            d.complete(distinct_prompt(next(live), 40), 4)
            return False

        wait_for(caught_up, "the stalled subscriber to see a live batch and replay the gap")
        check_exact(d, slow, "the stalled subscriber, after replay")
        assert slow.gaps >= 1, "the stalled subscriber lost nothing: the burst was too small"
        assert d.metric("banyan_kv_events_batches_dropped_total") == 0
        slow.close()
        sub.close()
    except BaseException:
        print(d.output()[-4000:], file=sys.stderr)
        raise
    finally:
        d.stop()


def run_bad_configs(workdir):

    def fails(config, expect, extra=()):
        d = Daemon(workdir, config, extra, expect_fail=True)
        try:
            code = d.proc.wait(120)
        except subprocess.TimeoutExpired:
            d.stop()
            raise AssertionError(f"banyand started with {config}")
        out = d.output()
        assert code != 0 and expect in out, f"{config}: exit {code}, wanted '{expect}' in:\n{out}"
        print(f"ok   refused at start-up: {expect}")

    fails({"enable_kv_cache_events": True, "publisher": "kafka"}, "kv-events-config.publisher")
    fails({"enable_kv_cache_events": True, "endpoint": "udp://127.0.0.1:1"},
          "kv-events-config.endpoint")
    fails({"enable_kv_cache_events": True, "topics": "x"}, "kv-events-config.topics")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        fails({"enable_kv_cache_events": True, "endpoint": f"tcp://127.0.0.1:{port}",
               "bind": True}, "kv-events-config.endpoint: cannot bind")


if __name__ == "__main__":
    main()
