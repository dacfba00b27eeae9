#!/usr/bin/env bash
# Checks tools/gpu/device_run.sh's verdict without a GPU: stub binaries that print gtest's summary
# lines and exit as a real binary would (pass, fail, a skipped test, exit 77 for "no device", a
# missing binary, a failing oracle). device_run.sh must exit 0 only when every step passed, and
# its summary must name the failing step. ctest runs it as device_run_selftest.
#   tools/gpu/device_run_selftest.sh [BUILD_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mapfile -t TESTS <"$root/tools/gpu/gpu_tests.list"
NOT_RUN="speculation served bench sanitizer"
errors=0

# The list is every binary ctest labels gpu, so that a new GPU test runs on the GPU machine:
# with a build folder (ctest passes its own), compared with `ctest -N -L gpu`.
if [[ -n ${1:-} ]]; then
  listed=$(printf '%s\n' "${TESTS[@]}" | sort)
  labelled=$(ctest --test-dir "$1" -N -L '^gpu$' | sed -n 's/^ *Test *#[0-9]*: *\([^ ]*\).*/\1/p' | sort)
  if [[ -z $labelled ]]; then
    echo "FAIL: ctest -N -L gpu in $1 lists no test"
    errors=$((errors + 1))
  elif [[ $listed != "$labelled" ]]; then
    echo "FAIL: tools/gpu/gpu_tests.list differs from the tests labelled gpu:"
    diff <(echo "$listed") <(echo "$labelled")
    errors=$((errors + 1))
  else
    echo "ok   tools/gpu/gpu_tests.list names every test labelled gpu ($(echo "$listed" | wc -l))"
  fi
fi

# stub NAME MODE: MODE is pass, fail, skip (one test skipped) or nodevice (exit 77).
stub() {
  local f=$work/bin/$1
  case $2 in
    pass) printf '[==========] 3 tests from 1 test suite ran. (5 ms total)\n[  PASSED  ] 3 tests.\n' ;;
    fail) printf '[==========] 3 tests from 1 test suite ran. (5 ms total)\n[  PASSED  ] 2 tests.\n[  FAILED  ] 1 test, listed below:\n[  FAILED  ] A.B\n' ;;
    skip) printf '[==========] 3 tests from 1 test suite ran. (5 ms total)\n[  PASSED  ] 2 tests.\n[  SKIPPED ] 1 test, listed below:\n[  SKIPPED ] A.B\n' ;;
    nodevice) printf '[ BANYAN SKIPPED BINARY ] %s: no CUDA device; no test ran (exit 77)\n' "$1" ;;
  esac >"$f.out"
  local rc=0
  case $2 in fail) rc=1 ;; nodevice) rc=77 ;; esac
  printf '#!/bin/sh\ncat "%s"\nexit %d\n' "$f.out" "$rc" >"$f"
  chmod +x "$f"
}

# expect LABEL WANT_RC PATTERN [ENV...]: runs device_run.sh, checks its exit status and that the
# summary matches PATTERN.
expect() {
  local label=$1 want=$2 pattern=$3
  shift 3
  local rc
  env "$@" BIN_DIR="$work/bin" OUT="$work/out-$label" bash "$root/tools/gpu/device_run.sh" \
    >"$work/$label.log" 2>&1
  rc=$?
  if [[ $rc != "$want" ]]; then
    echo "FAIL $label: device_run.sh exited $rc, want $want"
    cat "$work/$label.log"
    errors=$((errors + 1))
  elif ! grep -qE "$pattern" "$work/$label.log"; then
    echo "FAIL $label: the summary lacks /$pattern/"
    cat "$work/$label.log"
    errors=$((errors + 1))
  else
    echo "ok   $label (exit $rc)"
  fi
}

reset() {
  rm -rf "${work:?}/bin"
  mkdir -p "$work/bin"
  for t in "${TESTS[@]}"; do stub "$t" pass; done
}

reset
expect all_pass 0 '\| tpp_gpu_test \| PASS \| 3 \| 0 \| 0 \|' SKIP="oracle $NOT_RUN"
grep -q 'RESULT: PASS' "$work/all_pass.log" || { echo "FAIL all_pass: no RESULT: PASS"; errors=$((errors + 1)); }
for t in "${TESTS[@]}"; do
  grep -q "| $t | PASS |" "$work/all_pass.log" || { echo "FAIL all_pass: $t not listed"; errors=$((errors + 1)); }
done

stub gpu_sampling_test fail
expect one_fails 1 '\| gpu_sampling_test \| FAIL \(exit 1\) \| 2 \| 1 \| 0 \|' SKIP="oracle $NOT_RUN"

reset
stub gpu_draft_heads_test nodevice
expect no_device 1 '\| gpu_draft_heads_test \| FAIL: no CUDA device \(exit 77\)' SKIP="oracle $NOT_RUN"

reset
stub gpu_kernels_test skip
expect skipped_test 1 '\| gpu_kernels_test \| FAIL: 1 skipped' SKIP="oracle $NOT_RUN"

# With the oracle left out, gpu_backend_test may skip its oracle test (one), no more.
reset
stub gpu_backend_test skip
expect oracle_left_out 0 '\| gpu_backend_test \| PASS \| 2 \| 0 \| 1 \|' SKIP="oracle $NOT_RUN"

reset
rm "$work/bin/tpp_gpu_test"
expect missing_binary 1 '\| tpp_gpu_test \| FAIL: binary missing' SKIP="oracle $NOT_RUN"

# The oracle asked for and not written (no transformers here: a python3 that fails).
reset
mkdir -p "$work/fakepy"
printf '#!/bin/sh\necho "No module named torch" >&2\nexit 1\n' >"$work/fakepy/python3"
chmod +x "$work/fakepy/python3"
expect oracle_missing 1 '\| hf_oracle \| FAIL \(exit 1\)' SKIP="$NOT_RUN" PATH="$work/fakepy:$PATH"

# The speculation and served checks asked for without their binaries.
reset
expect checks_without_binaries 1 '\| speculation_identity \| FAIL: banyan missing' SKIP="oracle bench sanitizer"

if [[ $errors != 0 ]]; then
  echo "device_run_selftest: $errors case(s) failed"
  exit 1
fi
echo "device_run_selftest: every case gave the expected verdict"
