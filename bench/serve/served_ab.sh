#!/usr/bin/env bash
# Served decode throughput of one load under two settings, A and B, on one GPU, in one run: B's
# cost against A. Two uses so far:
#   - structured outputs: B sends every request with a tool's JSON Schema (B_BENCH_ARGS
#     "--json-schema bench/serve/schemas/search_flights.json"), A the same load free;
#   - KV events: B runs banyand with a publisher (B_DAEMON_ARGS "--kv-events-config ...").
# banyand runs --backend BACKEND on a dummy model of SHAPE, with TOKENIZER when given (the
# Llama 3.1 tokenizer.json: masks over its real 128,256 ids); when A and B take the same daemon
# flags one daemon serves both loads, else each setting gets its own start. For each client count
# C: banyan_serve_bench with C streaming clients in a closed loop (PROMPTS_PER_CLIENT x C prompts
# of a PREFIX-token shared prefix plus one token, at most C in flight), banyand's /metrics before
# and after each load.
#
# It prints one Markdown table: per C and setting, decode tok/s as the clients saw it (C / mean
# time per output token), the daemon's decode-step rows per second (rows over the decode steps'
# wall time: a per-step rate, whatever the outputs' lengths), each with B / A, mean output tokens
# per request, failed requests, and the device's idle share of a decode step; and the decode
# steps' mean rows and device time (a slower step, or fewer rows in each), and the clients' TTFT
# p50 and mean time per output token (a load whose requests end one at a time pays its
# admissions in both). Exit 1 when a load
# failed a request or measured nothing.
#
#   bench/serve/served_ab.sh BIN_DIR        (BIN_DIR holds banyand and banyan_serve_bench)
#   Environment: A_NAME (A), B_NAME (B), A_DAEMON_ARGS, B_DAEMON_ARGS, A_BENCH_ARGS, B_BENCH_ARGS
#   (word-split flag lists), TOKENIZER, SHAPE (llama-3-8b-shape), VOCAB (128256), CLIENTS
#   ("256 1024"), PREFIX (2048), OUTPUT_TOKENS (120), PROMPTS_PER_CLIENT (3), TEMPERATURE (1.0),
#   KV_BYTES (80e9), PORT (18090), BACKEND (cuda; cpu with a tiny SHAPE checks the script), WORK,
#   WARMUP_PROMPTS (0): with N > 0, each setting first runs an unmeasured load of N x the largest
#   C prompts on each daemon it uses (the steady state: for structured outputs, every grammar
#   position the load meets already classified; with 0 the first C pays for a cold cache).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:?usage: served_ab.sh BIN_DIR}
A_NAME=${A_NAME:-A}
B_NAME=${B_NAME:-B}
SHAPE=${SHAPE:-llama-3-8b-shape}
VOCAB=${VOCAB:-128256}
CLIENTS=${CLIENTS:-"256 1024"}
PREFIX=${PREFIX:-2048}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-120}
PROMPTS_PER_CLIENT=${PROMPTS_PER_CLIENT:-3}
TEMPERATURE=${TEMPERATURE:-1.0}
KV_BYTES=${KV_BYTES:-80000000000}
PORT=${PORT:-18090}
WARMUP_PROMPTS=${WARMUP_PROMPTS:-0}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
max_clients=$(tr ' ' '\n' <<<"$CLIENTS" | sort -n | tail -1)
model="dummy:$SHAPE:vocab=$VOCAB:context=$((PREFIX + OUTPUT_TOKENS + 64))"
tok=()
[[ -n ${TOKENIZER:-} ]] && tok=(--tokenizer "$TOKENIZER")

pid=""
running_args="-"
stop_daemon() {
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || true
  grep -E "engine:|cuda graphs:" "$WORK/banyand_$running_name.log" >&2 || true
  pid=""
}
trap stop_daemon EXIT
start_daemon() {  # start_daemon NAME ARGS: (re)starts banyand unless it runs with ARGS already
  [[ $2 == "$running_args" ]] && return 0
  stop_daemon
  running_args=$2
  running_name=$1
  warmed=" "
  # shellcheck disable=SC2086  # the daemon args are a list of flags
  "$BIN/banyand" --backend "${BACKEND:-cuda}" --model "$model" "${tok[@]}" --http-port "$PORT" \
    --grpc-port $((PORT + 1)) --kv-memory "$KV_BYTES" --max-batch "$max_clients" \
    --prefill-budget 8192 --queue-limit $((max_clients * PROMPTS_PER_CLIENT * 2)) \
    --listen-backlog 4096 $2 >"$WORK/banyand_$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  echo "served_ab.sh: banyand ($1) did not come up" >&2
  tail -20 "$WORK/banyand_$1.log" >&2
  exit 1
}

echo "| clients | setting | decode tok/s (C / mean TPOT) | $B_NAME / $A_NAME | daemon decode-step rows/s | $B_NAME / $A_NAME | decode step: rows / device ms | TTFT p50 / TPOT mean, ms | mean output tokens | failed | device idle share |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
status=0
for C in $CLIENTS; do
  for side in A B; do
    name_var=${side}_NAME daemon_var=${side}_DAEMON_ARGS bench_var=${side}_BENCH_ARGS
    name=${!name_var}
    start_daemon "$name" "${!daemon_var:-}"
    if ((WARMUP_PROMPTS > 0)) && [[ $warmed != *" $side "* ]]; then
      # shellcheck disable=SC2086  # the bench args are a list of flags
      "$BIN/banyan_serve_bench" --port "$PORT" --workload shared-prefix --prefix-tokens "$PREFIX" \
        --suffix-tokens 1 --output-tokens "$OUTPUT_TOKENS" \
        --num-prompts $((max_clients * WARMUP_PROMPTS)) --concurrency "$max_clients" \
        --vocab "$VOCAB" --seed 7 --temperature "$TEMPERATURE" ${!bench_var:-} \
        >"$WORK/warmup_$side.json" 2>"$WORK/warmup_$side.log" || status=1
      warmed+="$side "
    fi
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/m0"
    # shellcheck disable=SC2086  # the bench args are a list of flags
    "$BIN/banyan_serve_bench" --port "$PORT" --workload shared-prefix --prefix-tokens "$PREFIX" \
      --suffix-tokens 1 --output-tokens "$OUTPUT_TOKENS" \
      --num-prompts $((C * PROMPTS_PER_CLIENT)) --concurrency "$C" --vocab "$VOCAB" --seed "$C" \
      --temperature "$TEMPERATURE" ${!bench_var:-} \
      >"$WORK/serve_${C}_$side.json" 2>"$WORK/serve_${C}_$side.log" || status=1
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/m1"
    PYTHONPATH="$HERE" python3 - "$WORK/serve_${C}_$side.json" "$WORK/m0" "$WORK/m1" "$C" \
      "$side" "$name" "$WORK/a_$C" <<'PY' || status=1
import json, sys
from metrics_delta import delta, last_report
path, m0, m1, clients, side, name, a_file = sys.argv[1:8]
res = last_report(path)
d = delta(m0, m1)
rows, wall, dev = (d('banyan_decode_rows_total'), d('banyan_decode_step_seconds_total'),
                   d('banyan_decode_device_seconds_total'))
steps = d('banyan_decode_steps_total')
per_step = f"{rows / steps:.0f} / {dev / steps * 1e3:.2f}" if steps > 0 else '-'

tpot = res.get('tpot_ms', {}).get('mean', 0.0)
ttft = res.get('ttft_ms', {}).get('p50', 0.0)
decode = int(clients) / (tpot * 1e-3) if tpot > 0 else 0.0
daemon = rows / wall if wall > 0 else 0.0
mean_out = res.get('total_output_tokens', 0) / max(res.get('completed', 0), 1)
idle = (wall - dev) / wall if wall > 0 else 0.0
fails = res.get('failed', 0)
if side == 'A':
    json.dump({'decode': decode, 'daemon': daemon}, open(a_file, 'w'))
    r1 = r2 = '-'
else:
    a = json.load(open(a_file))
    r1 = f"**{decode / a['decode']:.3f}**" if a['decode'] > 0 else 'n/a'
    r2 = f"**{daemon / a['daemon']:.3f}**" if a['daemon'] > 0 else 'n/a'
print(f"| {clients} | {name} | {decode:,.0f} | {r1} | {daemon:,.0f} | {r2} | {per_step} | {ttft:.0f} / {tpot:.1f} | {mean_out:.1f} "
      f"| {fails} | {idle:.1%} |")
sys.exit(1 if fails or decode <= 0 else 0)
PY
  done
done
stop_daemon
trap - EXIT
echo "(logs and raw outputs in $WORK)" >&2
exit "$status"
