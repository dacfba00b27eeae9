#!/usr/bin/env bash
# The one command for the GPU machine (one H100/H200), run from the repository's top folder:
#   1. the transformers oracle (tools/gpu/hf_oracle.py), written to $OUT/hf-oracle;
#   2. every GPU test binary (GPU_TESTS below: tests/kernels/cuda and tests/engine/cuda), with
#      BANYAN_HF_ORACLE_DIR set, so gpu_backend_test's oracle check runs and fails if the oracle
#      is missing, and BANYAN_SOURCE_DIR set, so the binaries find the bundled model;
#   3. the speculation identity check (tools/gpu/speculation_identity.sh: banyan generate with
#      Hydra chains and trees against plain decoding; needs banyan, PyTorch and transformers);
#   4. the served check (bench/serve/served_vs_engine.sh, small: banyand under banyan_serve_bench
#      against gpu_decode_bench; needs a build with the server);
#   5. the decode benchmark (gpu_decode_bench) and a compute-sanitizer pass over the fast kernels.
# It prints a summary table last (every step: result, passed / failed / skipped tests, seconds,
# log; then the oracle table) and writes it to $OUT/summary.txt. Exit status 1 when any step
# failed, ran no test because it found no device, skipped a test, or lacked its binary; 0 only
# when every step that was asked for passed.
#
# The binaries come from either
#   - a build on this machine: BIN_DIR=build-gpu bash tools/gpu/device_run.sh
#     (configured and built as docs/gpu.md "Running on a GPU machine" shows), or
#   - .gpu/bundle.tar.xz, packed by tools/gpu/run_on_gpu.sh on a machine without a GPU and copied
#     here with the checkout: bash tools/gpu/device_run.sh
# Environment:
#   OUT=/tmp/banyan-gpu-out   logs and the summary
#   SKIP="..."   steps to leave out, by name: oracle, the test binaries' names (or tests for all
#     of them), speculation, served, bench, sanitizer. A step left out is listed as "left out"
#     and does not fail the run; with oracle left out gpu_backend_test may skip its oracle test.
#   TEST_TIMEOUT=600, BENCH_TIMEOUT=400, CHECK_TIMEOUT=1800   seconds per test binary, for the
#     benchmark, for each of the speculation and served checks
#   BENCH_ARGS="..."   extra arguments for gpu_decode_bench
#   SERVED_ENV="..."   overrides for the served check (default: one 32K vocabulary, 32 clients,
#     a 512-token prefix, 32 output tokens, 16 GB of KV)
#   GTEST_FILTER=...   narrows the test binaries as usual
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/banyan-gpu-out}
case $out in /*) ;; *) out=$root/$out ;; esac
mkdir -p "$out"
# Every binary with the ctest label gpu (tools/gpu/gpu_tests.list; device_run_selftest checks it).
mapfile -t GPU_TESTS <"$root/tools/gpu/gpu_tests.list"
TOOLS=(gpu_decode_bench banyan banyand banyan_serve_bench)
dest=$(mktemp -d /tmp/banyan-gpu.XXXXXX)
trap 'rm -rf "$dest"' EXIT
mkdir -p "$dest/bin" "$dest/lib"
if [[ -n ${BIN_DIR:-} ]]; then
  for t in "${GPU_TESTS[@]}" "${TOOLS[@]}"; do
    f=$(find "$BIN_DIR" -type f -name "$t" -perm -u+x 2>/dev/null | head -1)
    if [[ -n $f ]]; then ln -s "$(cd "$(dirname "$f")" && pwd)/$t" "$dest/bin/$t"; fi
  done
elif [[ -f .gpu/bundle.tar.xz ]]; then
  python3 -c "import tarfile, sys; tarfile.open('.gpu/bundle.tar.xz').extractall(sys.argv[1])" "$dest"
else
  echo "device_run.sh: no binaries: set BIN_DIR to a CUDA build folder, or pack .gpu/ with tools/gpu/run_on_gpu.sh" >&2
  exit 2
fi
export LD_LIBRARY_PATH=$dest/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export BANYAN_SOURCE_DIR=$root
export PYTHONUNBUFFERED=1
skip=" ${SKIP:-} "
left_out() { [[ $skip == *" $1 "* ]]; }
failed=0
rows=()  # one "| step | result | passed | failed | skipped | s | log |" line per step

row() {  # row STEP RESULT PASSED FAILED SKIPPED SECONDS LOG
  rows+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 |")
  case $2 in PASS | "left out") ;; *) failed=1 ;; esac
}

# gtest_count LOG WORD: N of the "[  WORD  ] N test(s)" summary line, 0 without one.
gtest_count() {
  local n
  n=$(grep -aE "^\[  $2 *\] [0-9]+ tests?[,.]" "$1" | tail -1 | sed -E 's/^[^]]*\] ([0-9]+).*/\1/')
  echo "${n:-0}"
}

# run_gtest NAME ALLOWED_SKIPS: one test binary. PASS needs exit 0, a gtest summary, no failed
# test and at most ALLOWED_SKIPS skipped tests. Exit 77 is the binary's own "no CUDA device".
run_gtest() {
  local name=$1 allowed=$2 log=$out/$1.log
  if left_out "$name" || left_out tests; then row "$name" "left out" - - - - -; return; fi
  if [[ ! -x $dest/bin/$name ]]; then
    row "$name" "FAIL: binary missing" - - - - -
    return
  fi
  local t0=$SECONDS rc
  timeout "${TEST_TIMEOUT:-600}" "$dest/bin/$name" >"$log" 2>&1
  rc=$?
  local secs=$((SECONDS - t0)) passed failed_n skipped result
  passed=$(gtest_count "$log" PASSED)
  failed_n=$(gtest_count "$log" FAILED)
  skipped=$(gtest_count "$log" SKIPPED)
  if [[ $rc == 77 ]]; then
    result="FAIL: no CUDA device (exit 77)"
  elif [[ $rc == 124 ]]; then
    result="FAIL: timed out after ${TEST_TIMEOUT:-600} s"
  elif [[ $rc != 0 || $failed_n != 0 ]]; then
    result="FAIL (exit $rc)"
  elif ! grep -aqE '^\[==========\] [0-9]+ tests? from .* ran\.' "$log"; then
    result="FAIL: no gtest summary"
  elif ((skipped > allowed)); then
    result="FAIL: $skipped skipped"
  else
    result=PASS
  fi
  row "$name" "$result" "$passed" "$failed_n" "$skipped" "$secs" "$log"
}

# run_check NAME LOG COMMAND...: a script step; PASS is exit 0.
run_check() {
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS rc
  "$@" >"$log" 2>&1
  rc=$?
  if [[ $rc == 0 ]]; then
    row "$name" PASS - - - $((SECONDS - t0)) "$log"
  else
    row "$name" "FAIL (exit $rc)" - - - $((SECONDS - t0)) "$log"
  fi
  return "$rc"
}

have_bins() {  # have_bins STEP BINARY...: a missing binary fails the step
  local b
  for b in "${@:2}"; do
    if [[ ! -x $dest/bin/$b ]]; then
      local why=""
      [[ $b == banyand || $b == banyan_serve_bench ]] && why=" (a build with the server has it)"
      row "$1" "FAIL: $b missing$why" - - - - -
      return 1
    fi
  done
}

# 1. The transformers oracle. Asked for unless left out; when it cannot be written the variable
# still points at its folder, so gpu_backend_test fails loudly as well.
oracle_skips=0
if left_out oracle; then
  row hf_oracle "left out" - - - - -
  oracle_skips=1
  unset BANYAN_HF_ORACLE_DIR
else
  export BANYAN_HF_ORACLE_DIR=$out/hf-oracle
  rm -rf "$BANYAN_HF_ORACLE_DIR"
  run_check hf_oracle "$out/hf_oracle.log" python3 tools/gpu/hf_oracle.py "$BANYAN_HF_ORACLE_DIR"
fi

# 2. Every GPU test binary.
for t in "${GPU_TESTS[@]}"; do
  allowed=0
  [[ $t == gpu_backend_test ]] && allowed=$oracle_skips
  run_gtest "$t" "$allowed"
done

# 3. Speculation: every speculative output identical to plain decoding.
if left_out speculation; then
  row speculation_identity "left out" - - - - -
elif have_bins speculation_identity banyan; then
  run_check speculation_identity "$out/speculation_identity.log" \
    timeout "${CHECK_TIMEOUT:-1800}" bash tools/gpu/speculation_identity.sh "$dest/bin" "$out/speculation"
fi

# 4. Served: banyand answers a load on the GPU, every request succeeds, and the table has the
# engine's and the daemon's rates.
served_ok() {  # served_ok TABLE: the row of each client count with rates > 0 and no failures
  awk -F'|' '/^\| [0-9]+ \|/ {
      rows++
      gsub(/[ ,]/, "", $3); gsub(/[ ,]/, "", $4)
      if ($3 + 0 <= 0 || $4 + 0 <= 0 || $0 ~ /failed/) bad++
    }
    END { exit !(rows > 0 && bad == 0) }' "$1"
}
if left_out served; then
  row served_vs_engine "left out" - - - - -
elif have_bins served_vs_engine banyand banyan_serve_bench gpu_decode_bench; then
  # shellcheck disable=SC2086  # SERVED_ENV is a list of VAR=value words
  if run_check served_vs_engine "$out/served_vs_engine.log" env VOCABS=32000 CLIENTS=32 \
    PREFIX=512 OUTPUT_TOKENS=32 KV_BYTES=16000000000 WORK="$out/served" ${SERVED_ENV:-} \
    timeout "${CHECK_TIMEOUT:-1800}" bash bench/serve/served_vs_engine.sh "$dest/bin" &&
    ! served_ok "$out/served_vs_engine.log"; then
    unset 'rows[-1]'
    row served_vs_engine "FAIL: a failed request or a zero rate" - - - - "$out/served_vs_engine.log"
  fi
fi

# 5. The benchmark and compute-sanitizer.
if left_out bench; then
  row gpu_decode_bench "left out" - - - - -
elif have_bins gpu_decode_bench gpu_decode_bench; then
  # shellcheck disable=SC2086
  run_check gpu_decode_bench "$out/bench.md" timeout "${BENCH_TIMEOUT:-400}" \
    "$dest/bin/gpu_decode_bench" ${BENCH_ARGS:-}
fi
if left_out sanitizer; then
  row compute-sanitizer "left out" - - - - -
elif ! command -v compute-sanitizer >/dev/null; then
  row compute-sanitizer "FAIL: compute-sanitizer not found (SKIP=sanitizer leaves it out)" - - - - -
elif have_bins compute-sanitizer gpu_kernels_test; then
  run_check compute-sanitizer "$out/sanitizer.log" timeout 300 compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$dest/bin/gpu_kernels_test" \
    --gtest_filter='CudaPrefillAttention.*:CudaLayerKernels.*:CudaDecodeAttention.LongContexts*'
fi

{
  echo "# GPU run $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  else
    echo "(no nvidia-smi)"
  fi
  echo
  echo "| step | result | tests passed | failed | skipped | s | log |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  if [[ -f $out/gpu_backend_test.log ]] && grep -q '^\[ transformers oracle \] model' "$out/gpu_backend_test.log"; then
    echo "The transformers oracle (gpu_backend_test, MatchesTransformersOracle):"
    sed -n '/^\[ transformers oracle \] model/,$p' "$out/gpu_backend_test.log" |
      grep '^\[ transformers oracle \]' | sed 's/^\[ transformers oracle \] //'
  else
    echo "The transformers oracle: no table (the oracle test did not run to its end)."
  fi
  [[ -f $out/speculation_identity.log ]] && grep -E 'outputs identical|speculation identity' "$out/speculation_identity.log"
  [[ -f $out/sanitizer.log ]] && grep -E 'ERROR SUMMARY' "$out/sanitizer.log" | head -3
  echo
  if [[ $failed == 0 ]]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
} >"$out/summary.txt"
cat "$out/summary.txt"
exit "$failed"
