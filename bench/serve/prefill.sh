#!/usr/bin/env bash
# Prefill through banyand against the physical ceiling, in one run. For each setting (bf16
# weights, FP8 weights) and each case NxL (N distinct random prompts of L tokens, sent at once,
# max_tokens 1, nothing cached):
#   1. prefill_ceiling measures the ceiling on this GPU: the step GEMMs at the rate cuBLAS(Lt)
#      reaches for their shapes plus causal attention's FLOPs at the dense tensor-core rate
#      (bench/prefill_ceiling.cc);
#   2. banyand serves the case twice with different prompts; the second run is reported (the
#      first loads kernels and picks GEMM algorithms). banyan_serve_bench gives the tokens, the
#      wall time and the TTFTs as the clients saw them; banyand's /metrics before and after give
#      its prefill steps, their prompt tokens and wall time.
# It prints one Markdown table per setting: served prefill tokens/s (prompt tokens / the load's
# wall time), TTFT p50 and max, the daemon's prefill-step tokens/s, the ceiling, and the served
# rate's share of it.
#
#   bench/serve/prefill.sh BIN_DIR
#     BIN_DIR holds banyand and banyan_serve_bench, and prefill_ceiling (a CUDA build's; without
#     it, or with BACKEND=cpu, the ceiling columns say "-").
#   Environment: SHAPE (llama-3-8b-shape), VOCAB (128256), CASES ("1x2048 1x8192 1x32768
#   64x2048"), BUDGET (8192: banyand's --prefill-budget and the ceiling's steps), KV_BYTES
#   (24000000000), SETTINGS ("bf16 fp8"; fp8: banyand --quantization fp8, prefill_ceiling
#   --fp8), BACKEND (cuda), BANYAND_ARGS (more banyand flags, word-split), WORK (a temporary
#   folder). banyand listens on an ephemeral loopback port.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)  # metrics_delta.py, banyand_port.sh
# shellcheck source=bench/serve/banyand_port.sh
. "$HERE/banyand_port.sh"
BIN=${1:?usage: prefill.sh BIN_DIR}
BANYAND=${BANYAND:-$BIN/banyand}
SERVE_BENCH=${SERVE_BENCH:-$BIN/banyan_serve_bench}
CEILING=${CEILING:-$BIN/prefill_ceiling}
SHAPE=${SHAPE:-llama-3-8b-shape}
VOCAB=${VOCAB:-128256}
CASES=${CASES:-"1x2048 1x8192 1x32768 64x2048"}
BUDGET=${BUDGET:-8192}
KV_BYTES=${KV_BYTES:-24000000000}
SETTINGS=${SETTINGS:-"bf16 fp8"}
BACKEND=${BACKEND:-cuda}
BANYAND_ARGS=${BANYAND_ARGS:-}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"

longest=0
widest=0
for c in $CASES; do
  n=${c%x*} l=${c#*x}
  [[ $n =~ ^[0-9]+$ && $l =~ ^[0-9]+$ && $n -ge 1 && $l -ge 1 ]] ||
    { echo "prefill.sh: a case is NxL (prompts x tokens), not '$c'" >&2; exit 2; }
  ((l > longest)) && longest=$l
  ((n > widest)) && widest=$n
done
model="dummy:$SHAPE:vocab=$VOCAB:context=$((longest + 64))"

# banyand's /metrics into a file (python3 rather than curl, which a fresh machine may lack).
scrape() {
  python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=60).read().decode())' \
    "http://127.0.0.1:$port/metrics" >"$1"
}

pid=
stop_daemon() {
  if [[ -n $pid ]]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
}
trap stop_daemon EXIT

for S in $SETTINGS; do
  case $S in
    bf16) daemon_args=() ceiling_args=() ;;
    fp8) daemon_args=(--quantization fp8) ceiling_args=(--fp8) ;;
    *) echo "prefill.sh: SETTINGS takes bf16 and fp8, not '$S'" >&2; exit 2 ;;
  esac
  echo "== $model, $S weights, prefill budget $BUDGET" >&2
  ceiling_md=$WORK/ceiling_$S.md
  : >"$ceiling_md"
  if [[ $BACKEND == cuda && -x $CEILING ]]; then
    "$CEILING" --model "$model" --cases "$(tr ' ' ',' <<<"$CASES")" --budget "$BUDGET" \
      "${ceiling_args[@]}" >"$ceiling_md" 2>&1 ||
      echo "prefill_ceiling failed; see $ceiling_md" >&2
  fi
  log=$WORK/banyand_$S.log
  # shellcheck disable=SC2086  # BANYAND_ARGS is word-split on purpose
  "$BANYAND" --backend "$BACKEND" --model "$model" --host 127.0.0.1 --http-port 0 --grpc-port 0 \
    --kv-memory "$KV_BYTES" --prefill-budget "$BUDGET" --max-batch "$widest" \
    --queue-limit $((widest * 2)) "${daemon_args[@]}" $BANYAND_ARGS >"$log" 2>&1 &
  pid=$!
  banyand_port "$pid" "$log" 600 || exit 1
  echo "$S weights ($model, prefill budget $BUDGET):"
  echo
  echo "| case | prompt tokens | served prefill tok/s | TTFT p50 / max, ms | daemon prefill-step tok/s (steps) | ceiling tok/s | served / ceiling |"
  echo "|---|---|---|---|---|---|---|"
  i=0
  for c in $CASES; do
    n=${c%x*} l=${c#*x}
    i=$((i + 1))
    for run in warm measured; do
      [[ $run == warm ]] && seed=$((1000 + i)) || seed=$i
      scrape "$WORK/m0"
      "$SERVE_BENCH" --port "$port" --workload no-sharing --num-prompts "$n" --prefix-tokens "$l" \
        --suffix-tokens 0 --output-tokens 1 --concurrency "$n" --vocab "$VOCAB" --seed "$seed" \
        --metrics-interval-ms 0 >"$WORK/serve_${S}_${c}_$run.json" \
        2>"$WORK/serve_${S}_${c}_$run.log" || { cat "$WORK/serve_${S}_${c}_$run.log" >&2; exit 1; }
      scrape "$WORK/m1"
    done
    PYTHONPATH="$HERE" python3 - "$WORK/serve_${S}_${c}_measured.json" "$WORK/m0" "$WORK/m1" \
      "$c" "$ceiling_md" <<'PY'
import sys
from metrics_delta import delta, last_report
res = last_report(sys.argv[1])
d = delta(sys.argv[2], sys.argv[3])
case = sys.argv[4]
tokens = res['total_input_tokens']
if res.get('failed', 0) or res['completed'] != int(case.split('x')[0]):
    sys.exit(f"prefill.sh: {case}: {res.get('failed', 0)} failed, {res['completed']} completed")
served = tokens / res['duration_s']
ttft = res['ttft_ms']
steps, ptok, psec = (d('banyan_prefill_steps_total'), d('banyan_prefill_tokens_total'),
                     d('banyan_prefill_step_seconds_total'))
if ptok != tokens:
    sys.exit(f"prefill.sh: {case}: the daemon computed {ptok:.0f} prompt tokens, "
             f"the clients sent {tokens} (a prefix-cache hit?)")
daemon = ptok / psec if psec > 0 else 0.0
ceiling = 0.0
for line in open(sys.argv[5]):
    cells = [x.strip() for x in line.split('|')]
    if len(cells) > 7 and cells[1] == case:
        ceiling = float(cells[7])
ratio = f"{served / ceiling:.2f}" if ceiling > 0 else "-"
ceil_txt = f"{ceiling:,.0f}" if ceiling > 0 else "-"
print(f"| {case} | {tokens:,} | {served:,.0f} | {ttft['p50']:,.0f} / {ttft['max']:,.0f} "
      f"| {daemon:,.0f} ({steps:.0f}) | {ceil_txt} | {ratio} |")
PY
  done
  echo
  stop_daemon
  if [[ -s $ceiling_md ]]; then sed -n '1,2p' "$ceiling_md" >&2; fi
done
echo "(logs and raw outputs in $WORK)" >&2
