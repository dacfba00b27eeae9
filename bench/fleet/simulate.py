"""Replays a recorded request trace (bench/fleet/record.py) on N simulated replicas and compares
round-robin routing with prefix-aware routing.

The model, stated so its numbers are read for what they are:
- Each replica holds a cache of --capacity-blocks blocks (default: the recorded replicas' pool,
  kv_chunks_total in meta.json), evicted least recently used. A block is one chunk of
  chunk_size tokens from position 0, keyed by its chained hash (bench/fleet/blocks.py, the
  hash banyand's KV events carry), so a block matches only with its whole prefix.
- A request's blocks: its prompt's full blocks, then one private block per further full chunk
  of prompt + output (the output and the prompt's tail are the request's own). Serving a
  request touches its cached blocks and inserts the rest, leaf first in recency, so eviction
  takes a chain's deepest blocks before its parents, as the prefix tree evicts leaves first.
- Cached tokens of a request: its longest run of leading prompt blocks present on the replica
  it is sent to, times chunk_size, at most prompt_tokens - 1 (the last prompt token is always
  computed, for its logits). Prefill tokens: the rest of the prompt.
- round-robin: request i goes to replica i mod N.
  prefix-aware: to the replica with the longest cached prefix, ties to the one that has been
  sent the fewest requests so far, then the lowest index. This is the prefix term of a router
  such as llm-d's precise prefix-cache scorer with the load term only as a tie-break: no
  queueing, no time; requests are served one after another in trace order.
Output: one JSON object per (replicas, policy) and a Markdown table.

  python3 bench/fleet/simulate.py results/fleet/rec --replicas 2 8 64 --json out.json
"""

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import blocks  # noqa: E402


def load_trace(folder):
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    with open(os.path.join(folder, "trace.jsonl")) as f:
        trace = [json.loads(line) for line in f if line.strip()]
    return meta, trace


def request_blocks(r, chunk):
    """(prompt block keys, private block keys) of one trace record."""
    prompt = blocks.chain(r["namespace"], r["prompt"], chunk)
    total = (r["prompt_tokens"] + r["completion_tokens"]) // chunk
    private = [f"r{r['id']}:{k}" for k in range(len(prompt), total)]
    return prompt, private


class Replica:
    def __init__(self, capacity_blocks):
        self.capacity = capacity_blocks
        self.lru = collections.OrderedDict()  # block key -> None, least recent first
        self.requests = 0
        self.evicted = 0

    def cached_prefix(self, prompt_blocks):
        n = 0
        for h in prompt_blocks:
            if h not in self.lru:
                break
            n += 1
        return n

    def serve(self, keys):
        for k in reversed(keys):  # the first block ends most recent: leaves are evicted first
            self.lru[k] = None
            self.lru.move_to_end(k)
        while len(self.lru) > self.capacity:
            self.lru.popitem(last=False)
            self.evicted += 1
        self.requests += 1


def simulate(trace, chunk, capacity_blocks, replicas, policy):
    fleet = [Replica(capacity_blocks) for _ in range(replicas)]
    prompt_tokens = cached_tokens = 0
    for i, r in enumerate(trace):
        prompt, private = request_blocks(r, chunk)
        if policy == "round-robin":
            target = fleet[i % replicas]
        elif policy == "prefix-aware":
            target = max(fleet, key=lambda rep: (rep.cached_prefix(prompt), -rep.requests))
        else:
            raise ValueError(policy)
        hit = min(target.cached_prefix(prompt) * chunk, max(r["prompt_tokens"] - 1, 0))
        prompt_tokens += r["prompt_tokens"]
        cached_tokens += hit
        target.serve(prompt + private)
    busiest = max(rep.requests for rep in fleet)
    return {"replicas": replicas, "policy": policy, "capacity_blocks": capacity_blocks,
            "requests": len(trace), "prompt_tokens": prompt_tokens,
            "cached_tokens": cached_tokens, "prefill_tokens": prompt_tokens - cached_tokens,
            "cached_share": cached_tokens / prompt_tokens if prompt_tokens else 0.0,
            "busiest_replica_share": busiest / len(trace) if trace else 0.0,
            "evicted_blocks": sum(rep.evicted for rep in fleet)}


def table(rows):
    out = ["| replicas | policy | cached share | prefill tokens | saved vs round-robin | "
           "busiest replica's share of requests |", "|---|---|---|---|---|---|"]
    rr = {r["replicas"]: r for r in rows if r["policy"] == "round-robin"}
    for r in rows:
        saved = rr[r["replicas"]]["prefill_tokens"] - r["prefill_tokens"]
        out.append(f"| {r['replicas']} | {r['policy']} | {r['cached_share']:.3f} | "
                   f"{r['prefill_tokens']:,} | {saved:,} | {r['busiest_replica_share']:.2f} |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="a folder written by record.py (meta.json, trace.jsonl)")
    p.add_argument("--replicas", type=int, nargs="+", default=[2, 8, 64])
    p.add_argument("--capacity-blocks", type=int, default=None)
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    meta, trace = load_trace(args.trace)
    chunk = meta["chunk_size"]
    capacity = args.capacity_blocks or min(meta["kv_chunks_total"])
    rows = [simulate(trace, chunk, capacity, n, policy)
            for n in args.replicas for policy in ("round-robin", "prefix-aware")]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"trace": os.path.basename(os.path.normpath(args.trace)),
                       "chunk_size": chunk, "rows": rows}, f, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()
