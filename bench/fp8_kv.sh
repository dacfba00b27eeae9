#!/usr/bin/env bash
# The FP8 KV cache against bf16 KV on one GPU, in one run: everything docs/model_formats.md
# ("FP8 KV cache") and issue 38 ask of it, each part in its own log under $WORK.
#   1. correctness first: gpu_kernels_test and tpp_gpu_test (the FP8 shapes among the others)
#      and gpu_backend_test's FP8-cache tests (logits against the CPU's FP8 rounding and against
#      exact KV, greedy agreement on the bundled model); a failure stops the run before any
#      timing;
#   2. the TPP microbenchmark with both caches on the shared-prefix cases (tpp_bench --kv both:
#      tpp and paged, FP8 / bf16, the FP8 floor);
#   3. the 8B shape's decode step with both caches (gpu_decode_bench, 2K prefix, batch 1 / 64 /
#      256 / 1,024: tok/s and the ratio to the physical limit counting each cache's bytes);
#   4. served through banyand (bench/serve/served_ab.sh, A = bf16 KV, B = --kv-cache-dtype fp8,
#      the same --kv-memory: B holds about twice the tokens) at 64 / 256 / 1,024 clients.
#
#   bench/fp8_kv.sh BIN_DIR     (BIN_DIR holds the test binaries, tpp_bench, gpu_decode_bench,
#                                banyand and banyan_serve_bench; any folder layout below it)
#   Environment: WORK (/tmp/banyan-fp8-kv), SKIP ("tests tpp decode served": parts to leave
#   out), KV_BYTES (40000000000, the served part's --kv-memory), CLIENTS ("64 256 1024"),
#   TOKENIZER (optional, for served_ab.sh), SHAPE (served_ab.sh's, llama-3-8b-shape),
#   EXTRA_DAEMON_ARGS (both daemons' further flags: for the 70B shape in FP8 on one GPU,
#   SHAPE=llama-3-70b-shape EXTRA_DAEMON_ARGS="--quantization fp8" and a KV_BYTES that fits).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:?usage: bench/fp8_kv.sh BIN_DIR}
WORK=${WORK:-/tmp/banyan-fp8-kv}
SKIP=" ${SKIP:-} "
mkdir -p "$WORK"
find_bin() { find -L "$BIN" -type f -name "$1" -perm -u+x 2>/dev/null | head -1; }
skipped() { [[ $SKIP == *" $1 "* ]]; }
export BANYAN_SOURCE_DIR=${BANYAN_SOURCE_DIR:-$(cd "$HERE/.." && pwd)}

if ! skipped tests; then
  for t in gpu_kernels_test tpp_gpu_test; do
    b=$(find_bin $t)
    [[ -n $b ]] || { echo "fp8_kv.sh: $t not found under $BIN" >&2; exit 1; }
    "$b" >"$WORK/$t.log" 2>&1 || { echo "fp8_kv.sh: $t failed (rc $?), see $WORK/$t.log" >&2; exit 1; }
    echo "$t: $(grep -E '^\[  PASSED  \]' "$WORK/$t.log")"
  done
  b=$(find_bin gpu_backend_test)
  [[ -n $b ]] || { echo "fp8_kv.sh: gpu_backend_test not found under $BIN" >&2; exit 1; }
  "$b" --gtest_filter='*Fp8KvCache*' >"$WORK/gpu_backend_fp8kv.log" 2>&1 ||
    { echo "fp8_kv.sh: gpu_backend_test failed, see $WORK/gpu_backend_fp8kv.log" >&2; exit 1; }
  grep -E "kv fp8|PASSED" "$WORK/gpu_backend_fp8kv.log"
fi

if ! skipped tpp; then
  b=$(find_bin tpp_bench)
  [[ -n $b ]] || { echo "fp8_kv.sh: tpp_bench not found under $BIN" >&2; exit 1; }
  for only in chunkattn_table hydragen_fig5 llama7b_b256 tail1to64; do
    "$b" --reps 20 --kv both --only "$only" >"$WORK/tpp_$only.log" 2>&1 ||
      { echo "fp8_kv.sh: tpp_bench --only $only failed, see $WORK/tpp_$only.log" >&2; exit 1; }
    # The side-by-side table is the last one printed.
    awk '/^\| case \| B \| kv heads/{t=""} /^\|/{t=t $0 "\n"} END{printf "%s", t}' "$WORK/tpp_$only.log"
  done
fi

if ! skipped decode; then
  b=$(find_bin gpu_decode_bench)
  [[ -n $b ]] || { echo "fp8_kv.sh: gpu_decode_bench not found under $BIN" >&2; exit 1; }
  for kv in "" --kv-fp8; do
    "$b" --shape llama-3-8b-shape --batches 1,64,256,1024 --prefix 2048 --modes tpp $kv \
      >"$WORK/decode${kv:+_fp8}.log" 2>&1 ||
      { echo "fp8_kv.sh: gpu_decode_bench $kv failed, see $WORK/decode${kv:+_fp8}.log" >&2; exit 1; }
    echo "gpu_decode_bench ${kv:-(bf16 KV)}:"
    grep -E "^\|" "$WORK/decode${kv:+_fp8}.log" | tail -8
  done
fi

if ! skipped served; then
  d=$(dirname "$(find_bin banyand)")
  [[ -x $d/banyand && -x $(find_bin banyan_serve_bench) ]] ||
    { echo "fp8_kv.sh: banyand or banyan_serve_bench not found under $BIN" >&2; exit 1; }
  mkdir -p "$WORK/bin"
  ln -sf "$(find_bin banyand)" "$WORK/bin/banyand"
  ln -sf "$(find_bin banyan_serve_bench)" "$WORK/bin/banyan_serve_bench"
  A_NAME=bf16kv B_NAME=fp8kv A_DAEMON_ARGS="${EXTRA_DAEMON_ARGS:-}" \
    B_DAEMON_ARGS="${EXTRA_DAEMON_ARGS:-} --kv-cache-dtype fp8" \
    CLIENTS=${CLIENTS:-"64 256 1024"} KV_BYTES=${KV_BYTES:-40000000000} WORK="$WORK/served" \
    "$HERE/serve/served_ab.sh" "$WORK/bin" | tee "$WORK/served.log"
  exit "${PIPESTATUS[0]}"
fi
