#!/bin/sh
# The serve bench's smoke test (ctest serve_bench_smoke):
#   smoke_test.sh BANYAND BANYAN_SERVE_BENCH SOURCE_DIR
# Starts the CPU banyand on the bundled stories260K on an ephemeral loopback port, runs two short
# loads (n-way, sampled, with Poisson arrivals; shared-prefix with a concurrency cap) and a small
# probe, and checks that the JSON reports are complete and consistent. No assertion on speed,
# and none on what a 20 ms poll of /metrics happened to see (a load of 0.1 s on a loaded machine
# can finish between two polls): that chunks were live and shared is read from the daemon's
# high-water marks (kv.daemon_peak_*), and the n-way load runs first so that its marks are its
# own; prefix reuse across requests from the usage's cached tokens.
# Exits 77 (skip) without python3, which checks the JSON.
set -u
banyand=$1
bench=$2
src=$3
if ! command -v python3 >/dev/null 2>&1; then
  echo "serve_bench_smoke: SKIPPED: python3 is not installed"
  exit 77
fi
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
"$banyand" --model "$src/models/stories260K/stories260K.bin" --host 127.0.0.1 \
  --http-port 0 --grpc-port 0 --queue-limit 4096 >"$tmp/daemon.log" 2>&1 &
pid=$!
. "$src/bench/serve/banyand_port.sh"
banyand_port "$pid" "$tmp/daemon.log" 300 || exit 1
echo "banyand ready on port $port"

out=$tmp/out.jsonl
set -x
"$bench" --port "$port" --workload n-way --num-prompts 6 --prefix-tokens 40 --n 4 \
  --output-tokens 24 --request-rate 30 --seed 7 --temperature 0.8 --metrics-interval-ms 20 \
  --label smoke-nway --output "$out" || exit 1
"$bench" --port "$port" --workload shared-prefix --num-prompts 32 --prefix-tokens 96 \
  --suffix-tokens 16 --output-tokens 48 --concurrency 8 --metrics-interval-ms 20 \
  --label smoke-shared --output "$out" || exit 1
"$bench" --port "$port" --probe --idle-connections 20 --trickle-connections 5 \
  --probe-requests 3 --probe-settle-ms 300 --label smoke-probe --output "$out" || exit 1
set +x

python3 - "$out" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [l.get("label") for l in lines] == ["smoke-nway", "smoke-shared", "smoke-probe"], lines
for r in lines[:2]:
    name = r["label"]
    w = r["workload"]
    assert r["type"] == "run", name
    assert r["num_requests"] == w["num_prompts"], name
    assert r["completed"] == r["num_requests"] and r["failed"] == 0, (name, r["failure_reasons"])
    want = w["num_prompts"] * w["output_tokens"] * w["n"]
    assert r["total_output_tokens"] == want, (name, r["total_output_tokens"], want)
    assert r["short_outputs"] == 0 and r["output_tokens_from_usage"], name
    assert r["total_tokens"] == r["total_input_tokens"] + r["total_output_tokens"], name
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        q = r[k]
        assert q["count"] > 0, (name, k)
        assert 0 <= q["p50"] <= q["p90"] <= q["p99"] <= q["max"], (name, k, q)
    assert r["ttft_ms"]["max"] <= r["e2e_ms"]["max"], name
    assert r["tpot_ms"]["count"] == r["completed"], name
    kv = r["kv"]
    # The first poll is sent before any request can end; what the polls saw is not asserted.
    assert kv["polls"] > 0 and kv["chunk_size"] > 0 and kv["chunks_total"] > 0, (name, kv)
    assert 0 <= kv["peak_chunks_live"] <= kv["chunks_total"], (name, kv)
    assert kv["unshared_chunks_all_requests"] > 0, (name, kv)
    before, after = kv["daemon_peak_before"], kv["daemon_peak_after"]
    assert before is not None and after is not None, (name, kv)
    assert 0 < after["chunks_live"] <= kv["chunks_total"], (name, kv)
    for k in ("chunks_live", "chunks_saved_by_sharing"):
        assert before[k] <= after[k], (name, k, kv)
    assert r["duration_s"] > 0 and r["request_throughput"] > 0, name
nway, shared = lines[0], lines[1]
# The n-way load ran first on a fresh daemon: its marks are its own. Sampled with n = 4, each
# request's four sequences hold its prompt's chunks once.
kv = nway["kv"]
assert kv["daemon_peak_before"] == {"chunks_live": 0, "chunks_saved_by_sharing": 0}, kv
assert kv["daemon_peak_after"]["chunks_saved_by_sharing"] > 0, kv
# Shared-prefix with 8 slots: a request sent after another ended finds the 96-token prefix in the
# prefix cache (a pool of thousands of chunks evicts nothing here).
assert shared["cached_prompt_tokens"] > 0, shared["cached_prompt_tokens"]
# n = 4: per request, 4 * (output_tokens - 1) gaps between text events at most (a token whose
# text is held back by the detokenizer makes no event).
assert nway["itl_ms"]["count"] <= 6 * 4 * 23, nway["itl_ms"]
p = lines[2]
assert p["type"] == "probe" and not p["failures"], p
assert p["idle_established"] == 20 and p["trickle_established"] == 5, p
assert len(p["baseline_ms"]) == 3 and len(p["probe_ms"]) == 3, p
assert p["max_delay_ms"] is not None, p
print("serve_bench_smoke: OK:", ", ".join(
    "%s %d requests %d tokens" % (l["label"], l["completed"], l["total_output_tokens"])
    for l in lines[:2]) + "; n-way peak %d chunks live, %d saved by sharing" % (
        nway["kv"]["daemon_peak_after"]["chunks_live"],
        nway["kv"]["daemon_peak_after"]["chunks_saved_by_sharing"]))
PY
