#!/usr/bin/env bash
# Set-up (packages, configure, build), then the whole test suite through ctest:
#  1. every test of the Release build in build/ (GPU tests carry the label `gpu` and skip
#     themselves where no device exists);
#  2. the memory-safety pass: the kvcache, scheduler (with its soak) and server tests and the
#     end-to-end soak against banyand, rebuilt with AddressSanitizer in build-asan/
#     (BANYAN_ASAN=0 skips it);
#  3. the libFuzzer targets for BANYAN_FUZZ_SECONDS each (tools/fuzz.sh; BANYAN_FUZZ=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh "$@"
JOBS="${BANYAN_JOBS:-$(nproc)}"
ctest --test-dir build --output-on-failure -j "$JOBS"

if [ "${BANYAN_ASAN:-1}" != "0" ]; then
  ASAN_TESTS=(kvcache_test scheduler_test server_http_server_test server_http_hardening_test
    grpc_server_test e2e_soak)
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBANYAN_SANITIZE=address \
    -DBANYAN_CUDA=OFF "$@" >/dev/null
  cmake --build build-asan -j "$JOBS" --target kvcache_test scheduler_test \
    server_http_server_test server_http_hardening_test grpc_server_test banyand \
    banyan-grpc-client
  regex="^($(IFS='|'; echo "${ASAN_TESTS[*]}"))$"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j 1 -R "$regex"
fi

# Fuzzing: every libFuzzer target (tests/fuzz) with ASan + UBSan for BANYAN_FUZZ_SECONDS
# (default 60) each, in build-fuzz/ (BANYAN_FUZZ=0 skips it; see docs/fuzzing.md).
if [ "${BANYAN_FUZZ:-1}" != "0" ]; then
  tools/fuzz.sh
fi
