"""Checks bench/fleet/simulate.py on a trace recorded by bench/fleet/record.py.

Properties, not numbers: every share lies in [0, 1]; cached + prefill tokens are the trace's
prompt tokens; prefix-aware routing caches at least as much as round-robin; with one replica the
two policies agree; with room for everything, one replica caches exactly what an oracle computed
from the token ids (each prompt's longest block-aligned common prefix with an earlier prompt of
its namespace) says it can; and the block hashes the simulator keys its caches by are those the
recorded daemons published for the same prompts.
  simulate_test.py TRACE_FOLDER
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "fleet"))
import blocks  # noqa: E402
import simulate  # noqa: E402

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def oracle_cached_tokens(trace, chunk):
    """Tokens one replica with unbounded room reuses: for each prompt, its longest common
    prefix with any earlier prompt of the same namespace, whole blocks only, at most all but
    the last token."""
    total = 0
    for i, r in enumerate(trace):
        best = 0
        for q in trace[:i]:
            if q["namespace"] != r["namespace"]:
                continue
            n = 0
            for a, b in zip(r["prompt"], q["prompt"]):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        total += min(best // chunk * chunk, r["prompt_tokens"] - 1)
    return total


def stored_hashes(folder, replica):
    held = set()
    with open(os.path.join(folder, f"events-r{replica}.jsonl")) as f:
        for line in f:
            for e in json.loads(line)["events"]:
                if e["type"] == "BlockStored":
                    held.update(e["block_hashes"])
    return held


def main():
    folder = sys.argv[1]
    meta, trace = simulate.load_trace(folder)
    chunk = meta["chunk_size"]
    capacity = min(meta["kv_chunks_total"])
    prompt_total = sum(r["prompt_tokens"] for r in trace)
    check(len(trace) > 0 and all(len(r["prompt"]) == r["prompt_tokens"] for r in trace),
          f"the trace has {len(trace)} requests whose prompts are their token counts")

    for n in (1, 2, 3, 8):
        rr = simulate.simulate(trace, chunk, capacity, n, "round-robin")
        pa = simulate.simulate(trace, chunk, capacity, n, "prefix-aware")
        for row in (rr, pa):
            name = f"{n} replicas, {row['policy']}"
            check(0.0 <= row["cached_share"] <= 1.0, f"{name}: cached share {row['cached_share']:.3f} in [0, 1]")
            check(0.0 < row["busiest_replica_share"] <= 1.0, f"{name}: busiest share in (0, 1]")
            check(row["cached_tokens"] + row["prefill_tokens"] == prompt_total == row["prompt_tokens"],
                  f"{name}: cached {row['cached_tokens']} + prefill {row['prefill_tokens']} = "
                  f"the trace's {prompt_total} prompt tokens")
        check(pa["cached_tokens"] >= rr["cached_tokens"],
              f"{n} replicas: prefix-aware caches {pa['cached_tokens']} >= round-robin's {rr['cached_tokens']}")
        if n == 1:
            check(pa == {**rr, "policy": "prefix-aware"}, "1 replica: both policies give the same result")

    unbounded = simulate.simulate(trace, chunk, 10**9, 1, "prefix-aware")
    oracle = oracle_cached_tokens(trace, chunk)
    check(unbounded["cached_tokens"] == oracle and unbounded["evicted_blocks"] == 0,
          f"1 replica, unbounded: cached {unbounded['cached_tokens']} = the token-id oracle's {oracle}")
    tight = simulate.simulate(trace, chunk, capacity, 1, "prefix-aware")
    check(tight["cached_tokens"] <= oracle, f"1 replica, {capacity} blocks: cached <= the oracle's")

    published = {i: stored_hashes(folder, i) for i in range(meta["replicas"])}
    unmatched = sum(1 for r in trace for h in blocks.chain(r["namespace"], r["prompt"], chunk)
                    if h not in published[r["replica"]])
    blocks_total = sum(r["prompt_tokens"] // chunk for r in trace)
    check(unmatched == 0 and blocks_total > 0,
          f"all {blocks_total} prompt blocks hash to blocks their replica published ({unmatched} do not)")

    if failures:
        print(f"fleet_simulation: {len(failures)} failures")
        sys.exit(1)
    print("fleet_simulation: OK")


if __name__ == "__main__":
    main()
