#!/usr/bin/env bash
# Runs on the GPU machine (one H100/H200), from the repository root: the GPU kernel tests, the
# transformers oracle and the CUDA backend tests, the decode benchmark, and a compute-sanitizer
# pass over the fast kernels. Logs go to $OUT (default /tmp/banyan-gpu-out); a summary is
# printed last. The binaries come from either
#   - a build on this machine: BIN_DIR=build-gpu bash tools/gpu/device_run.sh
#     (build-gpu configured and built as docs/gpu.md "Running on a GPU machine" shows), or
#   - .gpu/bundle.tar.xz, packed by tools/gpu/run_on_gpu.sh on a machine without a GPU and copied
#     here with the checkout: bash tools/gpu/device_run.sh
#   BENCH_ARGS="..."   extra arguments for gpu_decode_bench
#   BENCH_TIMEOUT=400, TEST_TIMEOUT=300   seconds the benchmark / each test binary may run
#   SKIP="bench sanitizer ..."   steps to leave out: tests (both test binaries), kernels
#     (gpu_kernels_test), tpp (tpp_gpu_test), backend (gpu_backend_test), oracle, bench,
#     sanitizer
#   GTEST_FILTER=...   narrows the test binaries as usual
set -uo pipefail
out=${OUT:-/tmp/banyan-gpu-out}
mkdir -p "$out"
dest=/tmp/banyan-gpu
rm -rf "$dest" && mkdir -p "$dest/bin" "$dest/lib"
if [[ -n ${BIN_DIR:-} ]]; then
  for t in gpu_kernels_test gpu_backend_test tpp_gpu_test gpu_decode_bench; do
    f=$(find "$BIN_DIR" -type f -name "$t" -perm -u+x | head -1)
    if [[ -n $f ]]; then ln -s "$(cd "$(dirname "$f")" && pwd)/$t" "$dest/bin/$t"; fi
  done
elif [[ -f .gpu/bundle.tar.xz ]]; then
  python3 -c "import tarfile, sys; tarfile.open('.gpu/bundle.tar.xz').extractall(sys.argv[1])" "$dest"
else
  echo "device_run.sh: no binaries: set BIN_DIR to a CUDA build folder, or pack .gpu/ with tools/gpu/run_on_gpu.sh" >&2
  exit 2
fi
export LD_LIBRARY_PATH=$dest/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export BANYAN_SOURCE_DIR=$PWD
export PYTHONUNBUFFERED=1
skip=" ${SKIP:-} "
summary=$out/summary.txt
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
} >"$summary" 2>&1

step() {  # step NAME LOG COMMAND...
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  echo "$name: rc=$rc ($((SECONDS - t0)) s)" >>"$summary"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |rel err|OOM message|transformers oracle|batch vs solo|tpp vs paged|TPP kernel|diverges|Failure|error' "$log" >>"$summary" || true
}

if [[ $skip != *" tests "* && $skip != *" kernels "* ]]; then
  step gpu_kernels_test "$out/gpu_kernels_test.log" timeout "${TEST_TIMEOUT:-300}" "$dest/bin/gpu_kernels_test"
fi
if [[ $skip != *" tests "* && $skip != *" tpp "* && -x "$dest/bin/tpp_gpu_test" ]]; then
  step tpp_gpu_test "$out/tpp_gpu_test.log" timeout "${TEST_TIMEOUT:-300}" "$dest/bin/tpp_gpu_test"
fi
if [[ $skip != *" oracle "* ]]; then
  step hf_oracle "$out/hf_oracle.log" python3 tools/gpu/hf_oracle.py /tmp/banyan-hf-oracle
  grep -E 'rotary|logits rms|^torch' "$out/hf_oracle.log" >>"$summary"
  export BANYAN_HF_ORACLE_DIR=/tmp/banyan-hf-oracle
fi
if [[ $skip != *" tests "* && $skip != *" backend "* ]]; then
  step gpu_backend_test "$out/gpu_backend_test.log" timeout "${TEST_TIMEOUT:-300}" "$dest/bin/gpu_backend_test"
fi
if [[ $skip != *" bench "* ]]; then
  # shellcheck disable=SC2086
  step gpu_decode_bench "$out/bench.md" timeout "${BENCH_TIMEOUT:-400}" "$dest/bin/gpu_decode_bench" ${BENCH_ARGS:-}
  cat "$out/bench.md" >>"$summary"
fi
if [[ $skip != *" sanitizer "* ]] && command -v compute-sanitizer >/dev/null; then
  step compute-sanitizer "$out/sanitizer.log" timeout 150 compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$dest/bin/gpu_kernels_test" \
    --gtest_filter='CudaPrefillAttention.*:CudaLayerKernels.*:CudaDecodeAttention.LongContexts*'
  grep -E 'ERROR SUMMARY|Invalid' "$out/sanitizer.log" | head -5 >>"$summary"
fi
cat "$summary"
