#!/usr/bin/env bash
# Served decode throughput against the engine's own, on one GPU, in one run:
#   1. gpu_decode_bench (the engine's steps driven directly, device argmax, graphs on) on
#      dummy:<shape>:vocab=<V> at B = each client count, a PREFIX-token shared prefix plus one
#      distinct token per sequence;
#   2. banyand --backend cuda on the same dummy model, and banyan_serve_bench with C streaming
#      clients at once, each a prompt of the same shared prefix plus one token, OUTPUT_TOKENS greedy
#      with ignore_eos. banyand's /metrics before and after each load give its decode steps, rows,
#      their wall time and the GPU's busy time within them (CUDA events).
# It prints one Markdown table per vocabulary: engine tok/s; served decode tok/s as the clients saw
# it (clients / mean time per output token) and its ratio to the engine's; served tok/s over the
# whole load (output tokens / wall time, the shared prefix's prefill and the ramp included); the
# daemon's decode-step rate and its ratio; host time per decode step (the loop's own, outside the
# backend calls, and the part before each launch that the device waits for: with the CPU a step
# ahead the rest overlaps the device); the device's idle share of a decode step.
#
#   bench/serve/served_vs_engine.sh BIN_DIR
#     BIN_DIR holds banyand, gpu_decode_bench and banyan_serve_bench (a build folder's
#     binaries copied together, or set BANYAND, ENGINE_BENCH, SERVE_BENCH to their paths).
#   Environment: SHAPE (llama-2-7b-shape), VOCABS ("32000 128256"), CLIENTS ("32 256 1024"),
#   PREFIX (2048), OUTPUT_TOKENS (120), ENGINE_STEPS (OUTPUT_TOKENS), KV_BYTES (80e9),
#   PORT (18080), ATTENTION (tpp), BANYAND_ARGS (more banyand flags, word-split), ENGINE_ARGS
#   (more gpu_decode_bench flags, word-split: --pipeline measures the engine with each step
#   launched before the previous step's tokens are back, as banyand's fed steps do).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)  # metrics_delta.py
BIN=${1:?usage: served_vs_engine.sh BIN_DIR}
BANYAND=${BANYAND:-$BIN/banyand}
ENGINE_BENCH=${ENGINE_BENCH:-$BIN/gpu_decode_bench}
SERVE_BENCH=${SERVE_BENCH:-$BIN/banyan_serve_bench}
SHAPE=${SHAPE:-llama-2-7b-shape}
VOCABS=${VOCABS:-"32000 128256"}
CLIENTS=${CLIENTS:-"32 256 1024"}
PREFIX=${PREFIX:-2048}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-120}
KV_BYTES=${KV_BYTES:-80000000000}
PORT=${PORT:-18080}
ATTENTION=${ATTENTION:-tpp}
# The engine decodes as many steps as the clients ask for tokens, so that both sides attend over
# the same private tails (a 7B MHA row's tail costs 16 KB of KV reads per token and layer).
ENGINE_STEPS=${ENGINE_STEPS:-$OUTPUT_TOKENS}
BANYAND_ARGS=${BANYAND_ARGS:-}
ENGINE_ARGS=${ENGINE_ARGS:-}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
max_clients=$(tr ' ' '\n' <<<"$CLIENTS" | sort -n | tail -1)

metric() {  # metric FILE NAME: the value of an unlabelled sample
  awk -v n="$2" '$1 == n { print $2 }' "$1"
}

for V in $VOCABS; do
  model="dummy:$SHAPE:vocab=$V:context=$((PREFIX + OUTPUT_TOKENS + 64))"
  echo "== $model" >&2
  "$ENGINE_BENCH" --model "$model" --batches "$(tr ' ' ',' <<<"$CLIENTS")" --prefix "$PREFIX" \
    --steps "$ENGINE_STEPS" --modes "$ATTENTION" --graphs on $ENGINE_ARGS >"$WORK/engine_$V.txt" 2>&1 ||
    echo "gpu_decode_bench failed; see $WORK/engine_$V.txt" >&2
  "$BANYAND" --backend cuda --model "$model" --attention "$ATTENTION" --http-port "$PORT" \
    --grpc-port $((PORT + 1)) --kv-memory "$KV_BYTES" --max-batch "$max_clients" \
    --prefill-budget 8192 --queue-limit $((max_clients * 2)) --listen-backlog 4096 $BANYAND_ARGS \
    >"$WORK/banyand_$V.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$WORK/banyand_$V.log" >&2; exit 1; }
    sleep 0.5
  done
  echo "| clients | engine tok/s | served decode tok/s (clients: C / mean TPOT) | served / engine | served tok/s, whole run (prefill, ramp) | daemon decode-step tok/s | daemon / engine | host ms per decode step: loop outside backend calls / before the launch | device idle share of a decode step |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for C in $CLIENTS; do
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/m0"
    "$SERVE_BENCH" --port "$PORT" --workload shared-prefix --prefix-tokens "$PREFIX" \
      --suffix-tokens 1 --output-tokens "$OUTPUT_TOKENS" --num-prompts "$C" --concurrency "$C" \
      --vocab "$V" --seed "$C" >"$WORK/serve_${V}_$C.json" 2>"$WORK/serve_${V}_$C.log" || {
      cat "$WORK/serve_${V}_$C.log" >&2
    }
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/m1"
    # The engine bench's tpp row for this batch: "| model | prefix | B | mode | ... tok/s ..."
    engine=$(awk -F'|' -v b="$C" -v mode="$ATTENTION" '
      $4+0 == b && $5 ~ "^ *" mode " *$" && $3+0 > 0 { gsub(/ /, "", $7); print $7; exit }' \
      "$WORK/engine_$V.txt")
    PYTHONPATH="$HERE" python3 - "$WORK/serve_${V}_$C.json" "$WORK/m0" "$WORK/m1" "$C" "${engine:-0}" <<'PY'
import sys
from metrics_delta import delta, last_report
res = last_report(sys.argv[1])
d = delta(sys.argv[2], sys.argv[3])
steps, rows = d('banyan_decode_steps_total'), d('banyan_decode_rows_total')
wall, dev = d('banyan_decode_step_seconds_total'), d('banyan_decode_device_seconds_total')
fwd = d('banyan_decode_forward_seconds_total')
launch = d('banyan_decode_launch_seconds_total')
engine = float(sys.argv[5])
served = res.get('output_throughput', 0.0)
tpot = res.get('tpot_ms', {}).get('mean', 0.0)
decode = float(sys.argv[4]) / (tpot * 1e-3) if tpot > 0 else 0.0
daemon = rows / wall if wall > 0 else 0
loop_ms = (wall - fwd) / steps * 1e3 if steps else 0
launch_ms = launch / steps * 1e3 if steps else 0
idle = (wall - dev) / wall if wall > 0 else 0
r = lambda x: f"{x / engine:.2f}" if engine > 0 else "n/a"
fails = res.get('failed', 0)
print(f"| {sys.argv[4]} | {engine:,.0f} | {decode:,.0f} | {r(decode)} "
      f"| {served:,.0f}{' (' + str(fails) + ' failed)' if fails else ''} ({r(served)}) "
      f"| {daemon:,.0f} | {r(daemon)} | {loop_ms:.2f} / {launch_ms:.2f} | {idle:.1%} |")
PY
  done
  kill -TERM "$pid"
  wait "$pid" || true
  grep -E "engine:|cuda graphs:" "$WORK/banyand_$V.log" >&2 || true
done
echo "(logs and raw outputs in $WORK)" >&2
