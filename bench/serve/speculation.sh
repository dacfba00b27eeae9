#!/usr/bin/env bash
# Speculative decoding served through banyand (one GPU), per-request and aggregate tok/s against
# no speculation in the same run.
# Every reported load follows an unreported one of the same size with other prompts, so that
# each mode meets it with its graphs captured and its memory touched (the start-up profile of
# the auto modes would otherwise warm them alone).
# (1) The bundled model with its Hydra heads, batch 1/8/64/256/1,024 (all requests at once, 128
#     tokens each): SPEC_MODES picks the modes (default: off chain-auto tree-auto). chain / tree
#     speculate in every step (--speculation-adaptive off); chain-auto / tree-auto are the
#     defaults (the governor with its start-up profile, at most 64 rows); chain-noprofile /
#     tree-noprofile the governor without its profile; chain-host / tree-host draft on the host;
#     lookup / lookup-auto: prompt lookup instead of the heads (3 candidates: n-grams of each
#     request's context, as no prompt repeats), forced or with the defaults.
# (2) The 8B shape (dummy weights) with prompt lookup, 3 candidates, the defaults against off,
#     batch 1/8/64/256/1,024 (SPEC_8B_BATCHES), a 512-token shared prefix: each load sent twice,
#     the first run non-repetitive (no continuation is known: only n-grams of each request's own
#     context draft), the second repetitive (the first run's continuation is the draft).
# (3) SPEC_7B=1: the 7B shape with prompt lookup forced, 1-4 candidates per chain against none,
#     batch 1/8/64 at a 2K context (tpp; paged at batch 64).
#   bench/serve/speculation.sh BIN_DIR [OUT_DIR]     (SPEC_8B=0 skips part 2)
#     BIN_DIR holds banyand and banyan_serve_bench (a CUDA build); run from the repository root.
#     BACKEND=cpu runs part 1 on the CPU backend (the governor's decisions where speculation
#     never pays; parts 2 and 3 are for a GPU).
#     SPEC_OUTPUT: part 1's output tokens per request (default 128; the model's context is 512);
#     SPEC_BATCHES its batch sizes (default 1 8 64 256 1024).
#     Prints one Markdown table (per-request tok/s = 1000 / mean TPOT, aggregate output tok/s,
#     and the daemon's own decode rate from /metrics: its decode steps' tokens over their seconds;
#     part 1 sends each measured load SPEC_REPEAT times, default 3, other prompts each time, and
#     gives the median: served rates of this tiny model vary by several percent from load to load);
#     banyand's logs (the start-up profile, the governor's and the acceptance summary) and the
#     JSON lines go to OUT_DIR.
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
B=$1
S=${2:-$(mktemp -d)}; mkdir -p "$S"
here=$(cd "$(dirname "$0")" && pwd)
port=18300; pid=
start() {
  "$B/banyand" --backend ${BACKEND:-cuda} --host 127.0.0.1 --http-port $port --grpc-port $((port + 1)) \
    --max-batch 1024 --prefill-budget 16384 --queue-limit 4096 "$@" > "$S/banyand_$tag.log" 2>&1 &
  pid=$!
  until curl -sf localhost:$port/health > /dev/null; do
    kill -0 $pid 2>/dev/null || { tail -5 "$S/banyand_$tag.log"; return 1; }; sleep 0.3
  done
}
stop() {
  kill -TERM $pid; wait $pid
  grep -hE "speculative:|speculation profile|speculation governor" "$S/banyand_$tag.log" | sed "s/^.*\] /[$tag] /"
}
load() {  # name batch prefix output vocab seed
  curl -sf "localhost:$port/metrics" > "$S/m0"
  "$B/banyan_serve_bench" --port $port --workload shared-prefix --prefix-tokens $3 --suffix-tokens 16 \
    --output-tokens $4 --num-prompts $2 --concurrency $2 --vocab $5 --seed $6 --label "$1" \
    --metrics-interval-ms 0 --output "$S/runs.jsonl" 2>> "$S/bench_err.txt" > /dev/null
  curl -sf "localhost:$port/metrics" > "$S/m1"
  # The daemon's side of the load: the tokens of its decode steps (every generated token but
  # each request's first, which its prompt's step samples) over those steps' wall time, free of
  # the clients' streaming and of the time between steps.
  PYTHONPATH="$here" python3 -c '
import json, sys
from metrics_delta import delta
d = delta(sys.argv[1], sys.argv[2])
print(json.dumps({"label": sys.argv[3], "seconds": d("banyan_decode_step_seconds_total"),
                  "tokens": d("banyan_generation_tokens_total") - int(sys.argv[4])}))
' "$S/m0" "$S/m1" "$1" "$2" >> "$S/daemon.jsonl"
}
M=models/stories260K/stories260K.bin
H=(--speculative hydra --draft-heads models/stories260K/hydra/config.json)
for mode in ${SPEC_MODES:-off chain-auto tree-auto}; do
  tag=small_$mode
  F=(--speculation-max-rows 65536 --speculation-adaptive off --speculation-min-accept 0)
  case $mode in
    off) extra=() ;;
    chain) extra=("${H[@]}" --draft-tokens 3 "${F[@]}") ;;
    tree) extra=("${H[@]}" --draft-tree 4,2,2 "${F[@]}") ;;
    chain-host) extra=("${H[@]}" --draft-tokens 3 "${F[@]}" --draft-on host) ;;
    tree-host) extra=("${H[@]}" --draft-tree 4,2,2 "${F[@]}" --draft-on host) ;;
    chain-auto) extra=("${H[@]}" --draft-tokens 3) ;;
    tree-auto) extra=("${H[@]}" --draft-tree 4,2,2) ;;
    chain-noprofile) extra=("${H[@]}" --draft-tokens 3 --speculation-profile off) ;;
    tree-noprofile) extra=("${H[@]}" --draft-tree 4,2,2 --speculation-profile off) ;;
    lookup) extra=(--speculative lookup --draft-tokens 3 --prompt-lookup-max 4 "${F[@]}") ;;
    lookup-auto) extra=(--speculative lookup --draft-tokens 3 --prompt-lookup-max 4) ;;
  esac
  start --model $M --kv-memory 2000000000 --chunk-size 16 "${extra[@]}" || continue
  for b in ${SPEC_BATCHES:-1 8 64 256 1024}; do
    load "small $mode b$b warm" $b 64 ${SPEC_OUTPUT:-128} 512 $((50 + b))
    for r in $(seq ${SPEC_REPEAT:-3}); do
      load "small $mode b$b" $b 64 ${SPEC_OUTPUT:-128} 512 $((100 * r + b))
    done
  done
  stop
done
D8=dummy:llama-3-8b-shape
for mode in ${SPEC_8B_MODES:-off lookup-auto}; do
  [ "${SPEC_8B:-1}" = 0 ] && break
  tag=8b_$mode
  extra=(); [ $mode = lookup-auto ] && extra=(--speculative lookup --draft-tokens 3)
  start --model $D8 --kv-memory 30000000000 "${extra[@]}" || continue
  for b in ${SPEC_8B_BATCHES:-1 8 64 256 1024}; do
    load "8b $mode b$b warm" $b 512 128 32000 $((700 + b))
    load "8b $mode b$b non-repetitive" $b 512 128 32000 $((300 + b))
    load "8b $mode b$b repetitive" $b 512 128 32000 $((300 + b))
  done
  stop
done
[ "${SPEC_7B:-0}" = 0 ] && D7= || D7=dummy:llama-2-7b-shape:vocab=32000
for cfg in ${D7:+"tpp 0" "tpp 1" "tpp 2" "tpp 3" "tpp 4" "paged 0" "paged 3"}; do
  set -- $cfg; att=$1; d=$2; tag=7b_${att}_$d
  extra=(); [ $d -gt 0 ] && extra=(--speculative lookup --draft-tokens $d --speculation-max-rows 65536 --speculation-adaptive off)
  start --model $D7 --attention $att --kv-memory 40000000000 "${extra[@]}" || continue
  bs="1 8 64"; [ $att = paged ] && bs=64
  for b in $bs; do
    load "7b $att d$d b$b warm" $b 2048 128 32000 $((200 + b))
    load "7b $att d$d b$b" $b 2048 128 32000 $((200 + b))
  done
  stop
done
python3 - "$S/runs.jsonl" "$S/daemon.jsonl" <<'PY'
import json, sys
from statistics import median
runs, daemon = {}, {}  # label -> its loads, in order (part 1 repeats each load SPEC_REPEAT times)
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("type") == "sweep" or "warm" in j.get("label", ""): continue
    runs.setdefault(j["label"], []).append(j)
for line in open(sys.argv[2]):
    j = json.loads(line)
    if j["seconds"] > 0: daemon.setdefault(j["label"], []).append(j["tokens"] / j["seconds"])
print("| run | loads | requests | per-request tok/s (1000 / mean TPOT), median | of each load | TPOT p50 ms | aggregate output tok/s, median | daemon decode tok/s (decode-step tokens / their seconds), median | of each load |")
print("|---|---|---|---|---|---|---|---|---|")
for label, js in runs.items():
    per = [1000 / j["tpot_ms"]["mean"] for j in js]
    dm = daemon.get(label, [])
    print(f"| {label} | {len(js)} | {js[0]['completed']} | {median(per):.1f} | "
          f"{' / '.join(f'{p:.0f}' for p in per)} | {median(j['tpot_ms']['p50'] for j in js):.2f} | "
          f"{median(j['output_throughput'] for j in js):.0f} | "
          f"{median(dm) if dm else 0:.0f} | {' / '.join(f'{p:.0f}' for p in dm)} |")
PY
