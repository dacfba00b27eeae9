#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with ASan + UBSan into build-san/ (through
# tools/build_sanitized.sh, which installs clang-15 and libfuzzer-15-dev) and runs each
# for BANYAN_FUZZ_SECONDS (default 60) over a copy of its committed seed corpus, so that
# nothing is written into the repository. Prints executions per target; exits non-zero when any
# target finds a crash, a leak, a timeout or an out-of-memory input (the input is kept under
# build-san/fuzz-run/<target>/ and named in the output).
#   tools/fuzz.sh [target...]          (default: every target)
# Environment: BANYAN_FUZZ_SECONDS, BANYAN_JOBS (targets run side by side; default nproc).
# The libraries come from tools/setup.sh (tools/test.sh runs it first).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET="${BANYAN_FUZZ_SECONDS:-60}"
JOBS="${BANYAN_JOBS:-$(nproc)}"
ALL_TARGETS=(openai_request grpc_translate spm_model tokenizer hf_tokenizer gguf safetensors llama2c)
if (($#)); then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi

tools/build_sanitized.sh "${TARGETS[@]/%/_fuzzer}"

RUN_DIR=build-san/fuzz-run
rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR"

# run_target NAME: fuzzes NAME, writing its log, and its exit status to status.
run_target() {
  local name=$1 dir="$RUN_DIR/$1"
  mkdir -p "$dir/corpus"
  cp -r "tests/fuzz/corpus/$name/." "$dir/corpus/"
  local args=(-max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048
              -print_final_stats=1 -artifact_prefix="$dir/")
  if [ -f "tests/fuzz/dict/$name.dict" ]; then args+=(-dict="tests/fuzz/dict/$name.dict"); fi
  local rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "build-san/tests/fuzz/${name}_fuzzer" "${args[@]}" "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/status"
}

echo "[fuzz] ${#TARGETS[@]} targets, ${SECONDS_PER_TARGET} s each, $JOBS at a time"
for name in "${TARGETS[@]}"; do
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  run_target "$name" &
done
wait

failed=0
printf '%-16s %12s %10s  %s\n' target executions exec/s result
for name in "${TARGETS[@]}"; do
  dir="$RUN_DIR/$name"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  rc=$(cat "$dir/status")
  result=ok
  if [ "$rc" != 0 ]; then
    failed=1
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$dir/log" | tail -1)
    result="FAILED (exit $rc; log $dir/log${artifact:+; input $artifact})"
  fi
  printf '%-16s %12s %10s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "$result"
done
if ((failed)); then
  for name in "${TARGETS[@]}"; do
    if [ "$(cat "$RUN_DIR/$name/status")" != 0 ]; then
      echo "----- $name: end of log"
      tail -n 40 "$RUN_DIR/$name/log"
    fi
  done
  exit 1
fi
