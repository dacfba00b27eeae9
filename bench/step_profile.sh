#!/usr/bin/env bash
# Where a decode step's time goes, kernel by kernel: Nsight Compute times every kernel of one
# decode step (gpu_decode_bench --profile-step --graphs off: the first timed step; ncu runs the
# kernels one at a time), grouped by kind (GEMM, attention, norm, RoPE + KV write, SwiGLU, ...),
# next to the step's time with CUDA graphs from the same binary. The difference between the
# graph step and the kernels' sum is what the kernels lose to each other on the device (launch
# gaps, drain and fill between dependent kernels, which ncu's serialised replay leaves out). ncu
# runs with --clock-control none (clocks as the graph run had them; its default locks them to
# base, which makes every kernel slower than in the graph run).
#
#   bench/step_profile.sh BIN_DIR [OUT]
#     BIN_DIR holds gpu_decode_bench (and its libraries in BIN_DIR/../lib or LD_LIBRARY_PATH).
#   Environment: SHAPE (llama-2-7b-shape), BATCH (1024), PREFIXES ("2048"), MODES ("none tpp"),
#   BENCH_ARGS (more gpu_decode_bench flags, word-split: --fp8 for the FP8 projections), TAG
#   (appended to the output files' names).
set -uo pipefail
BIN=${1:?usage: step_profile.sh BIN_DIR [OUT]}
OUT=${2:-${OUT:-/tmp/step-profile}}
mkdir -p "$OUT"
SHAPE=${SHAPE:-llama-2-7b-shape}
BATCH=${BATCH:-1024}
PREFIXES=${PREFIXES:-2048}
MODES=${MODES:-"none tpp"}
BENCH_ARGS=${BENCH_ARGS:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -z "$NCU" ] && { echo "step_profile.sh: no ncu"; exit 0; }
for P in $PREFIXES; do
  for M in $MODES; do
    tag="${SHAPE}_B${BATCH}_P${P}_$M${TAG:-}"
    # The graph step, same binary and shape (8 timed steps).
    "$BIN/gpu_decode_bench" --shape "$SHAPE" --batches "$BATCH" --prefix "$P" --steps 8 \
      --modes "$M" --graphs on --no-limit $BENCH_ARGS >"$OUT/graph_$tag.txt" 2>&1
    graph_ms=$(awk -F'|' -v m="$M" '{ f = $5; gsub(/ /, "", f) } f == m { gsub(/ /, "", $6); print $6; exit }' \
      "$OUT/graph_$tag.txt")
    timeout 900 "$NCU" --csv --profile-from-start off --clock-control none \
      --metrics gpu__time_duration.sum \
      "$BIN/gpu_decode_bench" --shape "$SHAPE" --batches "$BATCH" --prefix "$P" --steps 1 \
      --modes "$M" --graphs off --no-limit --profile-step $BENCH_ARGS >"$OUT/ncu_$tag.csv" \
      2>"$OUT/ncu_$tag.err"
    echo "== $tag"
    echo "decode step with CUDA graphs: ${graph_ms:-?} ms (gpu_decode_bench, 8 steps)"
    python3 - "$OUT/ncu_$tag.csv" <<'PY'
import collections, csv, re, sys
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
if not rows:
    print("no kernels captured"); sys.exit(0)
h = rows[0]
k, v, u = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
def kind(name):
    n = name.lower()
    for key, label in (("invariantgemm", "GEMM (invariant)"), ("invariantattention", "attention (invariant)"),
                       ("tppphase1", "attention: phase 1"), ("tppphase2", "attention: phase 2"),
                       ("tppmerge", "attention: merge"), ("tpp", "attention: other"),
                       ("mergestates", "attention: merge"), ("genericdecode", "attention: generic"), ("prefill", "attention: prefill"),
                       ("rmsnorm", "RMSNorm"), ("ropekv", "RoPE + KV write"), ("copykvslots", "KV slot copies"), ("swiglu", "SwiGLU"),
                       ("embeddingkernel", "embedding"), ("argmax", "argmax"),
                       ("fp8gemv", "GEMV (FP8)"), ("quantize", "FP8 quantize"), ("gemm", "GEMM (cuBLAS)"), ("nvjet", "GEMM (cuBLAS)"), ("sm90_xmma", "GEMM (cuBLAS)"),
                       ("cutlass", "GEMM (cuBLAS)"), ("splitk", "GEMM (cuBLAS)"),
                       ("memset", "memset")):
        if key in n: return label
    return "other: " + name[:60]
tot = collections.OrderedDict(); cnt = collections.Counter()
for r in rows[1:]:
    t = float(r[v].replace(",", "")) * scale.get(r[u], 1.0)
    kd = kind(r[k]); tot[kd] = tot.get(kd, 0.0) + t; cnt[kd] += 1
s = sum(tot.values())
print(f"| kind | kernels | us per step | share |\n|---|---|---|---|")
for kd, t in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"| {kd} | {cnt[kd]} | {t:,.0f} | {t / s:.1%} |")
print(f"| **all kernels** | {sum(cnt.values())} | **{s:,.0f}** | |")
PY
  done
done
