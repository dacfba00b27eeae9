#!/usr/bin/env bash
# Set-up (packages, configure, build), then the whole test suite through ctest.
# GPU tests carry the label `gpu` and skip themselves where no device exists.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh "$@"
ctest --test-dir build --output-on-failure -j "${BANYAN_JOBS:-$(nproc)}"
