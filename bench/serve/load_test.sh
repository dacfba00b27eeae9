#!/bin/sh
# The serve bench's load tests against the CPU banyand on the bundled stories260K:
#   load_test.sh streams|probe BANYAND BANYAN_SERVE_BENCH SOURCE_DIR
#
# streams (ctest serve_bench_4096_streams): 4,096 SSE streams open at once on one daemon, every
#   stream's text verified (--verify-greedy: identical prompts stream identical text, and 64
#   distinct prompts re-sent alone without streaming answer the same text). Asserts: all 4,096
#   completed, none failed, 4,096 in flight and 4,096 response streams open at once, no text
#   mismatch, and banyand's thread count (the max of /proc/PID/status Threads, sampled every
#   0.1 s through the load) at most 32. The bench connects all 4,096 before sending any request
#   (--connect-first), while the daemon has nothing else to do: a connect storm beside a daemon
#   already tokenizing and generating leaves some connections in the kernel's queues, and one set
#   up late can open its stream after the first streams ended (a run beside a compile job once
#   saw 4,094 open at once).
# probe (ctest serve_bench_probe_fairness): the fairness probe with 200 idle, 200 trickling, and
#   200 idle + 200 trickling connections; asserts only that every probe request completed and
#   every connection was established, and prints the delays.
#
# Neither asserts anything about time: both must pass on a busy 2-core machine. Exits 77 (skip)
# without python3 (it checks the JSON) or without /proc, or when the open-file limit cannot hold
# the streams.
set -u
mode=$1
banyand=$2
bench=$3
src=$4
max_threads=32
if ! command -v python3 >/dev/null 2>&1; then
  echo "load_test: SKIPPED: python3 is not installed"; exit 77
fi
if [ ! -r /proc/self/status ]; then echo "load_test: SKIPPED: no /proc"; exit 77; fi
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 5000 ]; then
  echo "load_test: SKIPPED: the hard open-file limit ($hard) cannot hold 4,096 sockets"; exit 77
fi

. "$src/bench/serve/banyand_port.sh"
tmp=$(mktemp -d)
pid=
sampler=
cleanup() {
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null; fi
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# start_banyand ARGS...: starts the daemon on an ephemeral loopback port; sets pid and port once
# it logs "serving model ... HTTP http://HOST:PORT".
start_banyand() {
  "$banyand" --model "$src/models/stories260K/stories260K.bin" --host 127.0.0.1 \
    --http-port 0 --grpc-port 0 "$@" >"$tmp/daemon.log" 2>&1 &
  pid=$!
  banyand_port "$pid" "$tmp/daemon.log" 300 || exit 1
  echo "banyand (pid $pid) ready on port $port"
}

# sample_daemon: until $tmp/stop exists, writes to $tmp/peak "THREADS FDS SAMPLES", the most
# threads and open descriptors banyand had at any sample.
sample_daemon() {
  threads_max=0 fds_max=0 samples=0
  while [ ! -e "$tmp/stop" ] && [ -r "/proc/$pid/status" ]; do
    while read -r key value _; do
      if [ "$key" = "Threads:" ] && [ "$value" -gt "$threads_max" ]; then threads_max=$value; fi
    done <"/proc/$pid/status"
    fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    [ "$fds" -gt "$fds_max" ] && fds_max=$fds
    samples=$((samples + 1))
    echo "$threads_max $fds_max $samples" >"$tmp/peak"
    sleep 0.1
  done
}

out=$tmp/out.jsonl
case "$mode" in
streams)
  start_banyand --queue-limit 8192 --max-batch 1024 --listen-backlog 8192 --kv-memory 1073741824
  read -r _ threads_idle _ <<EOF
$(grep '^Threads:' "/proc/$pid/status")
EOF
  sample_daemon &
  sampler=$!
  start=$(date +%s)
  # Prompts are a shared 96-token prefix and one of 2,048 16-token suffixes: about 1,770
  # distinct prompts, most of them sent more than once, whose streams must agree. (Narrowing the
  # ids instead, --vocab 5, repeats prompts too, but stories260K then answers all of them with
  # one text, and a crossed stream would go unseen: distinct_texts is asserted below.)
  set -x
  "$bench" --port "$port" --workload shared-prefix --num-prompts 4096 --concurrency 4096 \
    --connect-first \
    --prefix-tokens 96 --suffix-tokens 16 --suffix-pool 2048 --output-tokens 32 \
    --verify-greedy --verify-samples 64 --metrics-interval-ms 500 --label streams-4096 \
    --output "$out"
  rc=$?
  set +x
  wall=$(($(date +%s) - start))
  touch "$tmp/stop"
  wait "$sampler"
  sampler=
  read -r threads_max fds_max samples <"$tmp/peak"
  echo "bench exit $rc after ${wall} s; banyand threads: $threads_idle idle, max $threads_max" \
       "under load; open descriptors max $fds_max ($samples samples)"
  [ "$rc" -eq 0 ] || { tail -20 "$tmp/daemon.log"; exit 1; }
  python3 - "$out" "$threads_max" "$max_threads" "$fds_max" <<'PY' || exit 1
import json, sys
r = json.loads(open(sys.argv[1]).readline())
threads, limit, fds = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
assert r["num_requests"] == 4096, r["num_requests"]
assert r["completed"] == 4096 and r["failed"] == 0, (r["completed"], r["failure_reasons"])
assert r["total_output_tokens"] == 4096 * 32 and r["short_outputs"] == 0, r["total_output_tokens"]
a = r["arrivals"]
assert a["max_in_flight"] == 4096, a
assert a["max_streams_open"] == 4096, a
v = r["verify"]
assert v["mismatches"] == 0 and v["errors"] == 0, v
assert v["groups"] < 4096 and v["compared"] == 4096 - v["groups"], v  # some prompts repeat
assert v["checked"] == 64, v
assert v["distinct_texts"] * 4 >= v["groups"], ("texts too alike to catch crossed streams", v)
assert 0 < threads <= limit, ("banyand threads", threads, limit)
print("serve_bench_4096_streams: OK: %d completed, %.1f s, max in flight %d, streams open %d, "
      "banyand threads max %d, descriptors max %d; verify: %d groups (%d distinct texts), "
      "%d compared within groups, %d re-sent without streaming, %d mismatches"
      % (r["completed"], r["duration_s"], a["max_in_flight"], a["max_streams_open"], threads, fds,
         v["groups"], v["distinct_texts"], v["compared"], v["checked"], v["mismatches"]))
PY
  ;;
probe)
  start_banyand
  set -x
  "$bench" --port "$port" --probe --idle-connections 200 --trickle-connections 0 \
    --label probe-idle-200 --output "$out" || exit 1
  "$bench" --port "$port" --probe --idle-connections 0 --trickle-connections 200 \
    --label probe-trickle-200 --output "$out" || exit 1
  "$bench" --port "$port" --probe --idle-connections 200 --trickle-connections 200 \
    --label probe-both-200 --output "$out" || exit 1
  set +x
  python3 - "$out" <<'PY'
import json, statistics, sys
want = {"probe-idle-200": (200, 0), "probe-trickle-200": (0, 200), "probe-both-200": (200, 200)}
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [l["label"] for l in lines] == list(want), lines
for p in lines:
    idle, trickle = want[p["label"]]
    assert p["type"] == "probe" and not p["failures"], p
    assert p["idle_established"] == idle and p["trickle_established"] == trickle, p
    assert len(p["baseline_ms"]) == 10 and len(p["probe_ms"]) == 10, p
    print("%-18s baseline p50 %6.2f ms max %6.2f | probe p50 %6.2f max %6.2f | max delay %6.2f ms"
          " | closed by server: idle %s trickle %s"
          % (p["label"], statistics.median(p["baseline_ms"]), max(p["baseline_ms"]),
             statistics.median(p["probe_ms"]), max(p["probe_ms"]), p["max_delay_ms"],
             p.get("idle_closed_by_server"), p.get("trickle_closed_by_server")))
print("serve_bench_probe_fairness: OK (delays printed, not asserted)")
PY
  ;;
*)
  echo "usage: load_test.sh streams|probe BANYAND BANYAN_SERVE_BENCH SOURCE_DIR"; exit 2 ;;
esac
