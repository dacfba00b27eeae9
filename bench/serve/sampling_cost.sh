#!/usr/bin/env bash
# What requests with sampling adjustments cost the served decode rate, on one GPU, in one run:
# banyand --backend cuda on a dummy model, then banyan_serve_bench with C streaming clients at
# once (a PREFIX-token shared prefix plus one token each, OUTPUT_TOKENS greedy tokens with
# ignore_eos), every request carrying one adjustment per load: none, a frequency penalty, a
# logit_bias on BIAS_TOKENS ids, min_tokens = OUTPUT_TOKENS. The loads alternate ROUNDS times.
# Prints one Markdown table: served decode tok/s (C / mean TPOT) per load, the daemon's
# decode-step rate (/metrics), and each against the mean of the plain loads.
#
#   bench/serve/sampling_cost.sh BIN_DIR
#     BIN_DIR holds banyand and banyan_serve_bench (or set BANYAND, SERVE_BENCH).
#   Environment: SHAPE (llama-2-7b-shape), VOCAB (32000), CLIENTS (256), PREFIX (2048),
#   OUTPUT_TOKENS (120), BIAS_TOKENS (64), ROUNDS (2), KV_BYTES (80e9), PORT (18090).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)  # metrics_delta.py
BIN=${1:?usage: sampling_cost.sh BIN_DIR}
BANYAND=${BANYAND:-$BIN/banyand}
SERVE_BENCH=${SERVE_BENCH:-$BIN/banyan_serve_bench}
SHAPE=${SHAPE:-llama-2-7b-shape}
VOCAB=${VOCAB:-32000}
CLIENTS=${CLIENTS:-256}
PREFIX=${PREFIX:-2048}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-120}
BIAS_TOKENS=${BIAS_TOKENS:-64}
ROUNDS=${ROUNDS:-2}
KV_BYTES=${KV_BYTES:-80000000000}
PORT=${PORT:-18090}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"

model="dummy:$SHAPE:vocab=$VOCAB:context=$((PREFIX + OUTPUT_TOKENS + 64))"
"$BANYAND" --backend cuda --model "$model" --http-port "$PORT" --grpc-port $((PORT + 1)) \
  --kv-memory "$KV_BYTES" --max-batch "$CLIENTS" --prefill-budget 8192 \
  --queue-limit $((CLIENTS * 2)) --listen-backlog 4096 >"$WORK/banyand.log" 2>&1 &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$WORK/banyand.log" >&2; exit 1; }
  sleep 0.5
done

declare -A FLAGS=(
  [plain]=""
  [penalty]="--frequency-penalty 0.5"
  [bias]="--logit-bias-tokens $BIAS_TOKENS"
  [min_tokens]="--min-tokens $OUTPUT_TOKENS"
)
: >"$WORK/rows.tsv"
for round in $(seq "$ROUNDS"); do
  for load in plain penalty bias min_tokens; do
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/m0"
    # shellcheck disable=SC2086  # the flags are words
    "$SERVE_BENCH" --port "$PORT" --workload shared-prefix --prefix-tokens "$PREFIX" \
      --suffix-tokens 1 --output-tokens "$OUTPUT_TOKENS" --num-prompts "$CLIENTS" \
      --concurrency "$CLIENTS" --vocab "$VOCAB" --seed "$round" ${FLAGS[$load]} \
      >"$WORK/serve_${load}_$round.json" 2>"$WORK/serve_${load}_$round.log" ||
      cat "$WORK/serve_${load}_$round.log" >&2
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/m1"
    PYTHONPATH="$HERE" python3 - "$WORK/serve_${load}_$round.json" "$WORK/m0" "$WORK/m1" \
      "$CLIENTS" "$load" "$round" >>"$WORK/rows.tsv" <<'PY'
import sys
from metrics_delta import delta, last_report
res = last_report(sys.argv[1])
d = delta(sys.argv[2], sys.argv[3])
rows, wall = d('banyan_decode_rows_total'), d('banyan_decode_step_seconds_total')
tpot = res.get('tpot_ms', {}).get('mean', 0.0)
decode = float(sys.argv[4]) / (tpot * 1e-3) if tpot > 0 else 0.0
daemon = rows / wall if wall > 0 else 0.0
print(f"{sys.argv[5]}\t{sys.argv[6]}\t{decode:.0f}\t{daemon:.0f}\t{res.get('failed', 0)}")
PY
  done
done
python3 - "$WORK/rows.tsv" "$CLIENTS" <<'PY'
import collections, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    load, _, decode, daemon, failed = line.split('\t')
    runs[load].append((float(decode), float(daemon), int(failed)))
mean = lambda xs: sum(xs) / len(xs)
base = mean([r[0] for r in runs['plain']]), mean([r[1] for r in runs['plain']])
print(f"| load ({sys.argv[2]} clients) | served decode tok/s, per round | vs plain | "
      "daemon decode-step tok/s, per round | vs plain | failed |")
print("|---|---|---|---|---|---|")
for load, rs in runs.items():
    print(f"| {load} | {' / '.join(f'{r[0]:,.0f}' for r in rs)} | {mean([r[0] for r in rs]) / base[0]:.3f} "
          f"| {' / '.join(f'{r[1]:,.0f}' for r in rs)} | {mean([r[1] for r in rs]) / base[1]:.3f} "
          f"| {sum(r[2] for r in rs)} |")
PY
kill -TERM "$pid"
wait "$pid" || true
trap - EXIT
grep -E "engine:|cuda graphs:" "$WORK/banyand.log" >&2 || true
echo "(logs and raw outputs in $WORK)" >&2
