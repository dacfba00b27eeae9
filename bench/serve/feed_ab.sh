#!/usr/bin/env bash
# Fed steps off and on (banyand --feed) under Poisson arrivals, in one run: banyand is started
# with --feed off, then on, ROUNDS times alternating, on the same model, and banyan_serve_bench
# sends the same load each time: PROMPTS requests of a PREFIX-token shared prefix plus one
# distinct token, OUTPUT_TOKENS greedy tokens with ignore_eos, arriving at RATE requests/s
# (Poisson), at most CONCURRENCY in flight. New requests arrive at almost every engine step at
# such rates, so admission runs beside decoding all the time (the all-at-once load of
# served_vs_engine.sh admits once). One Markdown row per run: output tok/s, TTFT and TPOT (mean
# / p99), the fed share of the daemon's decode-only steps and the device's idle share of them
# (from /metrics before and after the load), and the preemptions it took (KV memory ran out).
#
#   bench/serve/feed_ab.sh BIN_DIR     (BIN_DIR holds banyand and banyan_serve_bench)
#   Environment: MODEL (dummy:llama-2-7b-shape:vocab=32000:context=2300), VOCAB (32000),
#   BACKEND (cuda), PREFIX (2048), OUTPUT_TOKENS (120), RATE (200), PROMPTS (2000),
#   CONCURRENCY (1024), ROUNDS (2), PORT (18090), KV_BYTES (80e9), BANYAND_ARGS (word-split),
#   PENALTY (0: none) and PENALISED_SHARE (1): a frequency penalty sent by that share of the
#   requests (before cf01fc4 one such request made every step wait for the one before);
#   N (1) samples per request at TEMPERATURE (0) (before pending forks, a request with n > 1
#   made the step after its prompt wait, and so did samples that still agreed).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)  # metrics_delta.py
BIN=${1:?usage: feed_ab.sh BIN_DIR}
MODEL=${MODEL:-dummy:llama-2-7b-shape:vocab=32000:context=2300}
VOCAB=${VOCAB:-32000}
BACKEND=${BACKEND:-cuda}
PREFIX=${PREFIX:-2048}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-120}
RATE=${RATE:-200}
PROMPTS=${PROMPTS:-2000}
CONCURRENCY=${CONCURRENCY:-1024}
ROUNDS=${ROUNDS:-2}
PORT=${PORT:-18090}
KV_BYTES=${KV_BYTES:-80000000000}
BANYAND_ARGS=${BANYAND_ARGS:-}
PENALTY=${PENALTY:-0}
PENALISED_SHARE=${PENALISED_SHARE:-1}
N=${N:-1}
TEMPERATURE=${TEMPERATURE:-0}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"

echo "| --feed | round | output tok/s | TTFT ms mean / p99 | TPOT ms mean / p99 | failed | fed share of decode steps | device idle share | preemptions |"
echo "|---|---|---|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  for feed in off on; do
    log="$WORK/banyand_${feed}_$round.log"
    "$BIN/banyand" --backend "$BACKEND" --model "$MODEL" --http-port "$PORT" \
      --grpc-port $((PORT + 1)) --kv-memory "$KV_BYTES" --max-batch "$CONCURRENCY" \
      --prefill-budget 8192 --queue-limit $((PROMPTS + CONCURRENCY)) --listen-backlog 4096 \
      --feed "$feed" $BANYAND_ARGS >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
      curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
      kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
      sleep 0.5
    done
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/m0"
    "$BIN/banyan_serve_bench" --port "$PORT" --workload shared-prefix --prefix-tokens "$PREFIX" \
      --suffix-tokens 1 --output-tokens "$OUTPUT_TOKENS" --num-prompts "$PROMPTS" \
      --concurrency "$CONCURRENCY" --request-rate "$RATE" --vocab "$VOCAB" --seed "$round" \
      --frequency-penalty "$PENALTY" --penalised-share "$PENALISED_SHARE" \
      --n "$N" --temperature "$TEMPERATURE" \
      >"$WORK/serve_${feed}_$round.json" 2>"$WORK/serve_${feed}_$round.log" ||
      cat "$WORK/serve_${feed}_$round.log" >&2
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/m1"
    kill -TERM "$pid"
    wait "$pid" || true
    PYTHONPATH="$HERE" python3 - "$WORK/serve_${feed}_$round.json" "$WORK/m0" "$WORK/m1" "$feed" "$round" <<'PY'
import sys
from metrics_delta import delta, last_report
res = last_report(sys.argv[1])
d = delta(sys.argv[2], sys.argv[3])
steps, fed = d('banyan_decode_steps_total'), d('banyan_decode_fed_steps_total')
wall, dev = d('banyan_decode_step_seconds_total'), d('banyan_decode_device_seconds_total')
ttft, tpot = res.get('ttft_ms', {}), res.get('tpot_ms', {})
print(f"| {sys.argv[4]} | {sys.argv[5]} | {res.get('output_throughput', 0):,.0f} "
      f"| {ttft.get('mean', 0):.1f} / {ttft.get('p99', 0):.1f} "
      f"| {tpot.get('mean', 0):.2f} / {tpot.get('p99', 0):.2f} | {res.get('failed', 0)} "
      f"| {fed / steps if steps else 0:.0%} ({fed:.0f} of {steps:.0f}) "
      f"| {(wall - dev) / wall if wall > 0 and dev > 0 else 0:.1%} "
      f"| {d('banyan_preemptions_total'):.0f} |")
PY
  done
done
echo "(logs and raw outputs in $WORK)" >&2
