#!/usr/bin/env bash
# Configures and builds the sanitized tree build-san/: clang-15 with ASan + UBSan (UB fatal) and
# libFuzzer's coverage instrumentation in the code the fuzz harnesses reach (-DBANYAN_FUZZ=ON,
# see cmake/BanyanHelpers.cmake), -O1 with line tables only (what ASan's and UBSan's reports
# need to name file and line; full debug info and -O2 cost a third more compile time), no CUDA.
# The serving shell (the HTTP and gRPC servers, the scheduler, the protobuf code: the targets of
# BANYAN_COLD_TARGETS in cmake/BanyanHelpers.cmake) at -O0, which compiles under ASan in about
# half the time; the code its tests and the fuzzers spend their time in keeps -O1. Measured on
# the 2-core machine, this tree's targets of tools/test.sh: 1,100 -> 880 CPU-s to build, its
# memory-safety tests 154 -> 186 CPU-s, the fuzzers' rates unchanged.
# One tree serves both sanitizer passes of tools/test.sh, the memory-safety tests and the fuzz
# targets, so that the libraries are compiled under sanitizers once rather than twice.
#   tools/build_sanitized.sh TARGET...
# Installs clang-15 and libfuzzer-15-dev when they are missing (the other libraries come from
# tools/setup.sh). Environment: BANYAN_JOBS (default nproc; tools/test.sh runs this build beside
# the Release build's cores + 2 jobs).
set -euo pipefail
cd "$(dirname "$0")/.."

if (($# == 0)); then
  echo "usage: tools/build_sanitized.sh TARGET..." >&2
  exit 2
fi

PACKAGES=(clang-15 libfuzzer-15-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[sanitized] installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

JOBS="${BANYAN_JOBS:-$(nproc)}"
SAN_FLAGS="-O1 -gline-tables-only -DNDEBUG"
CC=clang-15 CXX=clang++-15 cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$SAN_FLAGS" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$SAN_FLAGS" \
  -DBANYAN_CUDA=OFF -DBANYAN_FUZZ=ON -DBANYAN_COLD_LEVEL=0 >/dev/null
cmake --build build-san -j "$JOBS" --target "$@"
