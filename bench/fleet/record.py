"""Records what a prefix-aware router would see from a small fleet of banyand replicas.

Starts --replicas banyand processes on the bundled model (--backend cpu, or cuda: all on one GPU), each publishing KV-cache events
on loopback (docs/kv_events.md), drives a generated shared-prefix workload through them
round-robin, and writes to --out:
  trace.jsonl         one line per request: id, group (its system prompt), replica, namespace,
                      prompt (token ids), prompt_tokens, cached_tokens (as the daemon reported
                      them), completion_tokens; in the order sent
  events-r<i>.jsonl   replica i's event batches, in sequence order: seq, ts, events (BlockStored
                      with hashes, parent and token count; BlockRemoved; AllBlocksCleared)
  meta.json           the workload, chunk size, each replica's pool size in chunks, the checks
It then checks the recording: every subscriber holds exactly its replica's /debug/kv_blocks
(waited for, not slept for), and every request's prompt blocks, hashed as documented
(bench/fleet/blocks.py), were stored by the replica that served it.

  python3 bench/fleet/record.py --banyand build-cpu/server/banyand --out results/fleet/rec

The workload follows bench/serve's generated-shared-prefix: --groups system prompts of
--system-tokens ids, --questions private questions of --question-tokens ids each, ids drawn
uniformly from [3, vocab) with a seeded generator, the order shuffled.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import blocks  # noqa: E402

try:
    import zmq
except ImportError:  # a machine without pyzmq (the GPU machine): libzmq through ctypes
    import zmq_ctypes as zmq  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(REPO, "configs", "banyand.json")  # the bundled stories260K
TENANT, KEY = "fleet", "sk-fleet-recorder"
END_SEQ = (-1).to_bytes(8, "big", signed=True)
STARTUP_LIMIT_S = 120  # a daemon that is not ready by then has failed
SETTLE_LIMIT_S = 60    # nor a stream that has not caught up with the daemon by then


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, what, limit_s):
    """Polls condition until it holds; fails after limit_s (a guard against a hang)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"record: {what} did not happen within {limit_s} s")
        time.sleep(0.05)


def decode_event(event):
    """A compact record of one array- or map-encoded event (hashes, no token ids)."""
    if isinstance(event, dict):
        tag = event["type"]
        get = event.get
    else:
        tag = event[0]
        names = {"BlockStored": ["block_hashes", "parent_block_hash", "token_ids"],
                 "BlockRemoved": ["block_hashes"], "AllBlocksCleared": []}[tag]
        values = dict(zip(names, event[1:]))
        get = values.get
    if tag == "BlockStored":
        return {"type": tag, "block_hashes": list(get("block_hashes")),
                "parent_block_hash": get("parent_block_hash"),
                "num_tokens": len(get("token_ids"))}
    if tag == "BlockRemoved":
        return {"type": tag, "block_hashes": list(get("block_hashes"))}
    return {"type": tag}


class Recorder:
    """Subscribes to one replica's events, keeps every batch in order and the set held."""

    def __init__(self, pub, replay):
        ctx = zmq.Context.instance()
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(pub)
        self.replay = ctx.socket(zmq.DEALER)
        self.replay.connect(replay)
        self.lock = threading.Lock()
        self.batches = []
        self.held = set()
        self.stored = set()  # every hash ever stored
        self.next_seq = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def apply(self, seq, payload):
        if seq < self.next_seq:
            return
        ts, events = msgpack.unpackb(payload, raw=False)[:2]
        decoded = [decode_event(e) for e in events]
        with self.lock:
            for e in decoded:
                if e["type"] == "BlockStored":
                    self.held.update(e["block_hashes"])
                    self.stored.update(e["block_hashes"])
                elif e["type"] == "BlockRemoved":
                    self.held.difference_update(e["block_hashes"])
                else:
                    self.held.clear()
            self.batches.append({"seq": seq, "ts": ts, "events": decoded})
            self.next_seq = seq + 1

    def fill_from(self, start):
        """Replays every buffered batch from start (the subscriber joined late or lost some)."""
        self.replay.send_multipart([b"", start.to_bytes(8, "big")])
        while True:
            _, seq, payload = self.replay.recv_multipart()
            if seq == END_SEQ:
                return
            self.apply(int.from_bytes(seq, "big"), payload)

    def run(self):
        self.fill_from(0)
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        while not self.stop.is_set():
            if not poller.poll(100):
                # Idle: ask for anything after the last batch applied, so batches lost before
                # the SUB socket was connected are found even when no later batch shows a gap.
                self.fill_from(self.next_seq)
                continue
            _, seq_bytes, payload = self.sub.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big")
            if seq > self.next_seq:
                self.fill_from(self.next_seq)
            self.apply(seq, payload)

    def snapshot(self):
        with self.lock:
            return set(self.held)


class Daemon:
    def __init__(self, banyand, workdir, index, args):
        self.port = free_port()
        self.pub, self.replay = free_port(), free_port()
        tenants = os.path.join(workdir, "tenants.json")
        with open(tenants, "w") as f:
            json.dump([{"name": TENANT, "keys": [KEY]}], f)
        kv = {"enable_kv_cache_events": True, "publisher": "zmq",
              "endpoint": f"tcp://127.0.0.1:{self.pub}", "bind": True,
              "replay_endpoint": f"tcp://127.0.0.1:{self.replay}",
              "buffer_steps": 1000000, "topic": f"kv@replica-{index}@stories260K"}
        cmd = [banyand, "--config", CONFIG, "--backend", args.backend, "--http-port", str(self.port),
               "--grpc-port", "0", "--tenants", tenants, "--chunk-size", str(args.chunk_size),
               "--kv-memory", args.kv_memory, "--max-batch", str(args.max_batch),
               "--debug-kv-blocks", "on", "--kv-events-config", json.dumps(kv)]
        self.log = open(os.path.join(workdir, f"banyand-{index}.log"), "w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self.ready, f"replica {index} /ready", STARTUP_LIMIT_S)

    def ready(self):
        if self.proc.poll() is not None:
            self.log.seek(0)
            raise SystemExit(f"record: banyand exited with {self.proc.returncode}:\n"
                             f"{self.log.read()[-3000:]}")
        try:
            return self.request("GET", "/ready")[0] == 200
        except OSError:
            return False

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        headers = {"Authorization": f"Bearer {KEY}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        c.request(method, path, json.dumps(body) if body is not None else None, headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def metric(self, name):
        status, data = self.request("GET", "/metrics")
        m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", data.decode(), re.M)
        if status != 200 or not m:
            raise SystemExit(f"record: no {name} in /metrics")
        return float(m.group(1))

    def debug_blocks(self):
        status, data = self.request("GET", "/debug/kv_blocks")
        if status != 200:
            raise SystemExit(f"record: /debug/kv_blocks answered {status}")
        return set(json.loads(data)["blocks"])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def build_workload(args):
    rng = random.Random(args.seed)
    draw = lambda n: [rng.randrange(3, args.vocab) for _ in range(n)]  # noqa: E731
    systems = [draw(args.system_tokens) for _ in range(args.groups)]
    requests = [{"group": g, "prompt": systems[g] + draw(args.question_tokens)}
                for g in range(args.groups) for _ in range(args.questions)]
    rng.shuffle(requests)
    for i, r in enumerate(requests):
        r["id"] = i
    return requests


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--banyand", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--backend", default="cpu", help="cpu, or cuda: every replica on the one GPU")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--questions", type=int, default=24)
    p.add_argument("--system-tokens", type=int, default=192)
    p.add_argument("--question-tokens", type=int, default=32)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--vocab", type=int, default=512)  # stories260K
    p.add_argument("--chunk-size", type=int, default=16)
    p.add_argument("--kv-memory", default="1MiB")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight per replica")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    requests = build_workload(args)
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="banyan-fleet-")
    daemons, recorders = [], []
    try:
        for i in range(args.replicas):
            daemons.append(Daemon(args.banyand, workdir, i, args))
            recorders.append(Recorder(f"tcp://127.0.0.1:{daemons[-1].pub}",
                                      f"tcp://127.0.0.1:{daemons[-1].replay}"))
        ns = blocks.namespace(TENANT)

        def send(r):
            d = daemons[r["replica"]]
            body = {"model": "stories260K", "prompt": r["prompt"], "max_tokens": args.output_tokens,
                    "temperature": 0.0, "ignore_eos": True}
            status, data = d.request("POST", "/v1/completions", body)
            if status != 200:
                raise SystemExit(f"record: request {r['id']} answered {status}: {data[:300]}")
            usage = json.loads(data)["usage"]
            r["prompt_tokens"] = usage["prompt_tokens"]
            r["completion_tokens"] = usage["completion_tokens"]
            r["cached_tokens"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)

        for r in requests:
            r["replica"] = r["id"] % args.replicas
            r["namespace"] = ns
        workers = args.concurrency * args.replicas
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(send, requests))

        for i, (d, rec) in enumerate(zip(daemons, recorders)):
            wait_for(lambda d=d, rec=rec: rec.snapshot() == d.debug_blocks(),
                     f"replica {i}'s event stream matching /debug/kv_blocks", SETTLE_LIMIT_S)
        missing = 0
        for r in requests:
            chain = blocks.chain(r["namespace"], r["prompt"], args.chunk_size)
            missing += sum(1 for h in chain if h not in recorders[r["replica"]].stored)
        chunks_total = [int(d.metric("banyan_kv_chunks_total")) for d in daemons]
    finally:
        for rec in recorders:
            rec.stop.set()
        for d in daemons:
            d.stop()

    with open(os.path.join(args.out, "trace.jsonl"), "w") as f:
        for r in requests:
            keys = ["id", "group", "replica", "namespace", "prompt_tokens", "cached_tokens",
                    "completion_tokens", "prompt"]
            f.write(json.dumps({k: r[k] for k in keys}, separators=(",", ":")) + "\n")
    for i, rec in enumerate(recorders):
        with open(os.path.join(args.out, f"events-r{i}.jsonl"), "w") as f:
            for b in rec.batches:
                f.write(json.dumps(b, separators=(",", ":")) + "\n")
    meta = {"workload": {k: getattr(args, k) for k in
                         ["groups", "questions", "system_tokens", "question_tokens",
                          "output_tokens", "vocab", "seed", "concurrency", "max_batch",
                          "kv_memory"]},
            "replicas": args.replicas, "routing": "round-robin", "chunk_size": args.chunk_size,
            "kv_chunks_total": chunks_total,
            "batches": [len(r.batches) for r in recorders],
            "prompt_blocks_not_stored": missing}
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))
    if missing:
        raise SystemExit(f"record: {missing} prompt blocks hashed as documented were never "
                         "stored by the replica that served them")


if __name__ == "__main__":
    main()
