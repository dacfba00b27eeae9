#!/usr/bin/env bash
# TPP against paged decode attention, served, in one run on one machine. For each attention mode
# it starts banyand, runs a rate sweep (banyan_serve_bench --sweep-rates, Poisson arrivals) of
# each workload until the SLO breaks, and stops banyand; then it prints one Markdown table: the
# highest rate that held the SLO per mode, their ratio, the output throughput and TPOT p99 at
# that rate, and the KV footprint there (peak live chunks / the chunks the requests in flight
# would hold without sharing). Every JSON line lands in $WORK/<attention>_<workload>.jsonl
# (bench/serve/plot_sweep.py draws them); banyand's log in $WORK/banyand_<attention>.log.
#
#   bench/serve/compare_attention.sh BIN_DIR
#     BIN_DIR holds banyand and banyan_serve_bench (or set BANYAND and SERVE_BENCH to them).
#
# Environment (defaults: a 7B-shape dummy model on one large GPU):
#   Daemon:    BACKEND (cuda), MODEL (dummy:llama-2-7b-shape:vocab=32000:context=20480),
#              ATTENTIONS ("tpp paged"), KV_BYTES (80000000000), MAX_BATCH (512),
#              PREFILL_BUDGET (8192), QUEUE_LIMIT (8192), LISTEN_BACKLOG (4096), PORT (18080),
#              BANYAND_ARGS (more banyand flags, word-split)
#   Load:      WORKLOADS ("generated-shared-prefix multi-tenant long-document no-sharing"),
#              RATES_<workload> with '-' written '_' (e.g. RATES_no_sharing=2,4,8: req/s, comma
#              separated, ascending; RATES_<attention>_<workload> for one mode only),
#              SLO_TTFT_MS (2000), SLO_TPOT_MS (40), VOCAB (32000: token ids are drawn below
#              it; 512 for stories260K), SEED (1; workload k uses SEED+1000k)
#   Lengths:   NUM_PROMPTS (256: requests per sweep step), or SWEEP_SECONDS (each step sends
#              rate x SWEEP_SECONDS requests, so that high rates reach a steady state); the
#              others, when unset, leave the
#              bench's default for the workload (docs/serve_bench.md): OUTPUT_TOKENS,
#              PREFIX_TOKENS and SUFFIX_TOKENS (generated-shared-prefix and the other prefix
#              workloads), NUM_GROUPS and PROMPTS_PER_GROUP (generated-shared-prefix; tenants
#              and users of multi-tenant), MIN_PREFIX_TOKENS / MAX_PREFIX_TOKENS (multi-tenant
#              system prompts), QUESTION_TOKENS (multi-tenant and long-document suffixes),
#              DOCUMENT_TOKENS (long-document), PROMPT_TOKENS (no-sharing),
#              ARGS_<workload> (more bench flags, word-split)
#   WORK (a fresh temporary folder): where the outputs go.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
[[ $# -eq 1 && $1 != -h && $1 != --help ]] || usage
BIN=$1
BANYAND=${BANYAND:-$BIN/banyand}
SERVE_BENCH=${SERVE_BENCH:-$BIN/banyan_serve_bench}
for exe in "$BANYAND" "$SERVE_BENCH"; do
  [[ -x $exe ]] || { echo "compare_attention.sh: $exe is not an executable" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "compare_attention.sh: python3 is needed" >&2; exit 2; }
command -v curl >/dev/null || { echo "compare_attention.sh: curl is needed" >&2; exit 2; }

BACKEND=${BACKEND:-cuda}
MODEL=${MODEL:-dummy:llama-2-7b-shape:vocab=32000:context=20480}
ATTENTIONS=${ATTENTIONS:-"tpp paged"}
KV_BYTES=${KV_BYTES:-80000000000}
MAX_BATCH=${MAX_BATCH:-512}
PREFILL_BUDGET=${PREFILL_BUDGET:-8192}
QUEUE_LIMIT=${QUEUE_LIMIT:-8192}
LISTEN_BACKLOG=${LISTEN_BACKLOG:-4096}
PORT=${PORT:-18080}
BANYAND_ARGS=${BANYAND_ARGS:-}
WORKLOADS=${WORKLOADS:-"generated-shared-prefix multi-tenant long-document no-sharing"}
SLO_TTFT_MS=${SLO_TTFT_MS:-2000}
SLO_TPOT_MS=${SLO_TPOT_MS:-40}
VOCAB=${VOCAB:-32000}
NUM_PROMPTS=${NUM_PROMPTS:-256}
SEED=${SEED:-1}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"

# Default rates (req/s), a guess for the default model and lengths. A step takes about
# NUM_PROMPTS / rate seconds plus its drain, and the sweep stops after the first rate whose p99
# TTFT or p99 TPOT breaks the SLO: at 256 prompts a whole list costs at most about 160 s.
default_rates() {
  case $1 in
    generated-shared-prefix | no-sharing) echo 4,8,12,16,24,32,48,64 ;;
    *) echo 4,8,16,24,32,48,64,96,128 ;;
  esac
}

# workload_args WORKLOAD: the bench's workload flags from the length variables that are set.
workload_args() {
  local w=$1 extra_var="ARGS_${1//-/_}"
  local -a a=(--workload "$w" --vocab "$VOCAB")
  if [[ -n ${SWEEP_SECONDS:-} ]]; then
    a+=(--sweep-seconds "$SWEEP_SECONDS")
  else
    a+=(--num-prompts "$NUM_PROMPTS")
  fi
  [[ -n ${OUTPUT_TOKENS:-} ]] && a+=(--output-tokens "$OUTPUT_TOKENS")
  case $w in
    multi-tenant)
      [[ -n ${MIN_PREFIX_TOKENS:-} ]] && a+=(--min-prefix-tokens "$MIN_PREFIX_TOKENS")
      [[ -n ${MAX_PREFIX_TOKENS:-} ]] && a+=(--max-prefix-tokens "$MAX_PREFIX_TOKENS")
      [[ -n ${QUESTION_TOKENS:-} ]] && a+=(--suffix-tokens "$QUESTION_TOKENS")
      [[ -n ${NUM_GROUPS:-} ]] && a+=(--num-groups "$NUM_GROUPS")
      [[ -n ${PROMPTS_PER_GROUP:-} ]] && a+=(--prompts-per-group "$PROMPTS_PER_GROUP")
      ;;
    long-document)
      [[ -n ${DOCUMENT_TOKENS:-} ]] && a+=(--prefix-tokens "$DOCUMENT_TOKENS")
      [[ -n ${QUESTION_TOKENS:-} ]] && a+=(--suffix-tokens "$QUESTION_TOKENS")
      ;;
    no-sharing)
      [[ -n ${PROMPT_TOKENS:-} ]] && a+=(--suffix-tokens "$PROMPT_TOKENS")
      ;;
    *)
      [[ -n ${PREFIX_TOKENS:-} ]] && a+=(--prefix-tokens "$PREFIX_TOKENS")
      [[ -n ${SUFFIX_TOKENS:-} ]] && a+=(--suffix-tokens "$SUFFIX_TOKENS")
      if [[ $w == generated-shared-prefix ]]; then
        [[ -n ${NUM_GROUPS:-} ]] && a+=(--num-groups "$NUM_GROUPS")
        [[ -n ${PROMPTS_PER_GROUP:-} ]] && a+=(--prompts-per-group "$PROMPTS_PER_GROUP")
      fi
      ;;
  esac
  # shellcheck disable=SC2206  # ARGS_<workload> is a list of flags, split on purpose
  [[ -n ${!extra_var:-} ]] && a+=(${!extra_var})
  printf '%s\n' "${a[@]}"
}

pid=
stop_daemon() {
  if [[ -n $pid ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || true
    pid=
  fi
}
trap stop_daemon EXIT

start=$(date +%s)
for attention in $ATTENTIONS; do
  log="$WORK/banyand_$attention.log"
  echo "== banyand --backend $BACKEND --model $MODEL --attention $attention" >&2
  # shellcheck disable=SC2086  # BANYAND_ARGS is a list of flags, split on purpose
  "$BANYAND" --backend "$BACKEND" --model "$MODEL" --attention "$attention" \
    --host 127.0.0.1 --http-port "$PORT" --grpc-port $((PORT + 1)) --kv-memory "$KV_BYTES" \
    --max-batch "$MAX_BATCH" --prefill-budget "$PREFILL_BUDGET" --queue-limit "$QUEUE_LIMIT" \
    --listen-backlog "$LISTEN_BACKLOG" $BANYAND_ARGS >"$log" 2>&1 &
  pid=$!
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; pid=; exit 1; }
    sleep 0.5
  done
  k=0
  for w in $WORKLOADS; do
    rates_var="RATES_${w//-/_}" mode_rates_var="RATES_${attention}_${w//-/_}"
    rates=${!mode_rates_var:-${!rates_var:-$(default_rates "$w")}}
    out="$WORK/${attention}_$w.jsonl"
    : >"$out"
    mapfile -t args < <(workload_args "$w")
    echo "-- $attention $w: rates $rates; ${args[*]}" >&2
    # A sweep exits 0 once it ran (its failures are its result); 1 or 2: it could not run.
    "$SERVE_BENCH" --port "$PORT" "${args[@]}" --seed $((SEED + 1000 * k)) \
      --sweep-rates "$rates" --slo-ttft-ms "$SLO_TTFT_MS" --slo-tpot-ms "$SLO_TPOT_MS" \
      --label "$attention" --output "$out" 2>"$WORK/${attention}_$w.log" ||
      { tail -n 20 "$WORK/${attention}_$w.log" >&2; echo "sweep failed: $attention $w" >&2; }
    grep '^====' "$WORK/${attention}_$w.log" >&2 || true
    k=$((k + 1))
  done
  stop_daemon
done
echo "(whole run $(($(date +%s) - start)) s; outputs in $WORK)" >&2

python3 - "$WORK" "$SLO_TTFT_MS" "$SLO_TPOT_MS" "$ATTENTIONS" "$WORKLOADS" "$(dirname "$0")" <<'PY'
import os, sys

sys.path.insert(0, sys.argv[6])
from sweep_jsonl import read_sweep

work, slo_ttft, slo_tpot = sys.argv[1:4]
attentions, workloads = sys.argv[4].split(), sys.argv[5].split()


def load(attention, workload):
    """The sweep summary and the runs (by rate) of one JSONL file; (None, {}) if absent."""
    sweep, steps = read_sweep(os.path.join(work, f"{attention}_{workload}.jsonl"))
    return sweep, {j["arrivals"]["request_rate"]: j for j in steps}


def at_best(attention, workload):
    """(rate text, rate or None, the run at that rate or None)."""
    sweep, runs = load(attention, workload)
    if sweep is None:
        return "no result", None, None
    best = sweep.get("max_sustainable_rate")
    if best is None:
        first = sweep["rates"][0]["rate"] if sweep.get("rates") else "?"
        return f"< {first:g}", None, None
    text = f"{best:g}" if sweep.get("first_failing_rate") is not None else f">= {best:g}"
    return text, best, runs.get(best)


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def kv_share(run):
    if run is None:
        return None
    kv = run.get("kv", {})
    live, unshared = kv.get("peak_chunks_live", 0), kv.get("peak_unshared_chunks_in_flight", 0)
    return live / unshared if unshared else None


def kv_text(run):
    share = kv_share(run)
    if share is None:
        return "n/a"
    kv = run["kv"]
    return f"{share:.2f} ({kv['peak_chunks_live']}/{kv['peak_unshared_chunks_in_flight']})"


print(f"SLO: p99 TTFT <= {slo_ttft} ms, p99 TPOT <= {slo_tpot} ms, no failed request. "
      "Throughput, TPOT and KV at each mode's highest rate that held.\n")
# tpp then paged, whatever order they ran in (a mode that was not run shows "no result").
a, b = ["tpp", "paged"] if set(attentions) <= {"tpp", "paged"} else attentions[:2]
cols = [f"{a} max sustainable req/s", f"{b} max sustainable req/s", f"{a}/{b}",
        f"{a} output tok/s", f"{b} output tok/s", f"{a} TPOT p99 ms", f"{b} TPOT p99 ms",
        f"{a} peak KV chunks / sum of contexts", f"{b} peak KV chunks / sum of contexts"]
print("| workload | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for w in workloads:
    ta, ra, runa = at_best(a, w)
    tb, rb, runb = at_best(b, w)
    ratio = f"{ra / rb:.2f}" if ra and rb else "n/a"
    out = lambda r: fmt(r and r.get("output_throughput"), ",.0f")
    tpot = lambda r: fmt(r and r.get("tpot_ms", {}).get("p99"), ".1f")
    print(f"| {w} | {ta} | {tb} | {ratio} | {out(runa)} | {out(runb)} | {tpot(runa)} "
          f"| {tpot(runb)} | {kv_text(runa)} | {kv_text(runb)} |")
PY
