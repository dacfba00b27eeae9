#!/usr/bin/env bash
# Issue 15's end-to-end matrix on one GPU: gpu_decode_bench for the 7B shape (llama-2-7b-shape,
# MHA) and Llama-3-8B's shape (GQA 32q/8kv, ffn 14336, vocab 128256), B = 256 and 1,024, shared
# prefix P = 2K and 16K, modes tpp, paged and none, 64 timed decode steps, CUDA graphs on; each
# run with its ratio to the physical limit (PERFORMANCE.md section 2, bench/physical_limit.h),
# which the benchmark computes from the shape and its own GEMM-only measurement.
#
#   bench/gpu_decode_sweep.sh BENCH_BINARY [OUT_DIR] [extra gpu_decode_bench args...]
#   e.g. bench/gpu_decode_sweep.sh build-gpu/bench/gpu_decode_bench sweep-out
#
# Writes OUT_DIR (default gpu-decode-sweep) /run.md (the whole output: the GEMM-only tables, one
# row per run) and /table.md (the summary: tok/s per mode, tpp/none, tpp/paged, the limit's
# tok/s, every mode against it, none against the GEMM-only step), and prints table.md.
# DRY_RUN=1 passes --dry-run: no GPU needed, it prints the runs' KV sizes and limit terms.
#
# Cost on one H200 (estimate, not yet measured): 24 runs; paged at B = 1,024 and P = 16K reads
# ~8.8 TB of KV per 7B step (~2 s), so that run alone takes ~2.5 min; the whole sweep ~6-8 min.
# The 7B KV pool at B = 1,024, P = 16K is 104 GiB, plus 12.6 GiB of weights: it needs a 141 GB
# H200 (an 80 GB H100 runs it with B = 256 only: pass --batches 256 as an extra argument).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  sed -n '2,20p' "$0"
  exit 2
fi
bench=$1
out=${2:-gpu-decode-sweep}
shift $(($# >= 2 ? 2 : 1))
mkdir -p "$out"
args=(--shape llama-2-7b-shape --shape llama-3-8b-shape --batches 256,1024 --prefix 2048,16384
  --steps 64 --modes tpp,paged,none --graphs on --max-paged-tokens 20000000)
[[ ${DRY_RUN:-0} != 0 ]] && args+=(--dry-run)
export BANYAN_SOURCE_DIR=${BANYAN_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
"$bench" "${args[@]}" "$@" | tee "$out/run.md"
# The summary is the last table (its header names the graphs column after B).
awk '/^\| model \| prefix \| B \| graphs \|/ { keep = 1; buf = "" } keep { buf = buf $0 "\n" }
     END { printf "%s", buf }' "$out/run.md" >"$out/table.md"
if [[ -s $out/table.md ]]; then
  echo
  echo "summary ($out/table.md):"
  cat "$out/table.md"
fi
