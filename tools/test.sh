#!/usr/bin/env bash
# Set-up (packages, configure, build), then the whole test suite through ctest:
#  1. every test of the Release build in build/ (GPU tests carry the label `gpu` and skip
#     themselves where no device exists);
#  2. the memory-safety pass: the kvcache, scheduler (with its soak) and server tests and the
#     end-to-end soak against banyand, under ASan + UBSan in the sanitized tree build-san/
#     (tools/build_sanitized.sh; BANYAN_ASAN=0 skips it);
#  3. the libFuzzer targets for BANYAN_FUZZ_SECONDS each (tools/fuzz.sh; BANYAN_FUZZ=0 skips it),
#     built in the same tree, so the sanitized libraries are compiled once for both passes.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh "$@"
JOBS="${BANYAN_JOBS:-$(nproc)}"
ctest --test-dir build --output-on-failure -j "$JOBS"

# $JOBS at a time, like the Release pass (e2e_soak is RUN_SERIAL: it runs alone).
ASAN_TESTS=(kvcache_test scheduler_test server_http_server_test server_http_hardening_test
  grpc_server_test e2e_soak)
sanitized=()
if [ "${BANYAN_ASAN:-1}" != "0" ]; then
  sanitized+=(kvcache_test scheduler_test server_http_server_test server_http_hardening_test
    grpc_server_test banyand banyan-grpc-client)
fi
if [ "${BANYAN_FUZZ:-1}" != "0" ]; then sanitized+=(banyan_fuzzers); fi  # every *_fuzzer
# One build of both passes' targets: ninja keeps both cores busy across them.
if ((${#sanitized[@]})); then tools/build_sanitized.sh "${sanitized[@]}"; fi

if [ "${BANYAN_ASAN:-1}" != "0" ]; then
  regex="^($(IFS='|'; echo "${ASAN_TESTS[*]}"))$"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-san --output-on-failure -j "$JOBS" -R "$regex"
fi

# Fuzzing: every libFuzzer target (tests/fuzz) for BANYAN_FUZZ_SECONDS (default 60) each
# (see docs/fuzzing.md); the build above left nothing for tools/fuzz.sh to rebuild.
if [ "${BANYAN_FUZZ:-1}" != "0" ]; then
  tools/fuzz.sh
fi
