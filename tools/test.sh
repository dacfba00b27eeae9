#!/usr/bin/env bash
# Set-up (packages, configure, build), then the whole test suite through ctest:
#  1. every test of the Release build in build/ (GPU tests carry the label `gpu` and skip
#     themselves where no device exists);
#  2. the memory-safety pass: the kvcache, scheduler (with its soak) and server tests and the
#     end-to-end soak against banyand, under ASan + UBSan in the sanitized tree build-san/
#     (tools/build_sanitized.sh; BANYAN_ASAN=0 skips it);
#  3. the libFuzzer targets for BANYAN_FUZZ_SECONDS each (default 30 here; tools/fuzz.sh alone
#     runs 60; BANYAN_FUZZ=0 skips them), built in the same tree, so the sanitized libraries are
#     compiled once for both passes.
# The two trees build at the same time (the sanitized one's log: build-san/build.log), and the
# Release tests start as soon as their tree is built, beside the rest of the sanitized build: a
# core never idles through one build's long links and last objects.
set -euo pipefail
cd "$(dirname "$0")/.."
# Without a GPU nothing runs the CUDA code's machine code: it is compiled to PTX only, which
# checks every kernel's source in a third less time (cmake/BanyanHelpers.cmake).
ptx_only=OFF
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || ptx_only=ON
BANYAN_SETUP_BUILD=0 tools/setup.sh -DBANYAN_CUDA_PTX_ONLY="$ptx_only" "$@"
JOBS="${BANYAN_JOBS:-$(nproc)}"

ASAN_TESTS=('kvcache_test_shard_[0-9]+' 'scheduler_test_shard_[0-9]+'
  'server_http_server_test_shard_[0-9]+' grpc_server_test e2e_soak)
sanitized=()
if [ "${BANYAN_ASAN:-1}" != "0" ]; then
  sanitized+=(kvcache_test scheduler_test server_http_server_test
    grpc_server_test banyand banyan-grpc-client)
fi
if [ "${BANYAN_FUZZ:-1}" != "0" ]; then sanitized+=(banyan_fuzzers); fi  # every *_fuzzer
san_pid=
if ((${#sanitized[@]})); then
  mkdir -p build-san
  # In a session of its own (setsid execs in this background job, so the job's pid leads its
  # process group): when this script ends early, by a failure or a signal, the EXIT trap stops
  # the whole build, its compilers included.
  BANYAN_JOBS="${BANYAN_BUILD_JOBS:-$((JOBS + 2))}" setsid tools/build_sanitized.sh \
    "${sanitized[@]}" > build-san/build.log 2>&1 &
  san_pid=$!
fi
stop_sanitized() {
  [ -z "$san_pid" ] || kill -- "-$san_pid" 2>/dev/null || true
  san_pid=
}
trap stop_sanitized EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Ninja's default of cores + 2 jobs (see tools/setup.sh).
cmake --build build -j "${BANYAN_BUILD_JOBS:-$((JOBS + 2))}"

# Cores + 2 tests at a time: the end-to-end tests spend most of their time waiting on a daemon
# and its sockets (the few that measure the whole machine are RUN_SERIAL and run alone).
ctest --test-dir build --output-on-failure -j "$((JOBS + 2))"

if [ -n "$san_pid" ] && ! wait "$san_pid"; then
  san_pid=
  tail -n 60 build-san/build.log
  echo "[test] the sanitized build failed (build-san/build.log)" >&2
  exit 1
fi
[ -z "$san_pid" ] || echo "[test] the sanitized tree is built (its log: build-san/build.log)"
san_pid=

if [ "${BANYAN_ASAN:-1}" != "0" ]; then
  regex="^($(IFS='|'; echo "${ASAN_TESTS[*]}"))$"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-san --output-on-failure -j "$((JOBS + 2))" -R "$regex"
fi

# Fuzzing: every libFuzzer target (tests/fuzz) for BANYAN_FUZZ_SECONDS each (see
# docs/fuzzing.md); the build above left nothing for tools/fuzz.sh to rebuild.
if [ "${BANYAN_FUZZ:-1}" != "0" ]; then
  BANYAN_FUZZ_SECONDS="${BANYAN_FUZZ_SECONDS:-30}" tools/fuzz.sh
fi
