#!/bin/sh
# Runs end-to-end test files with Node's built-in test runner:
#   tests/e2e/run.sh FILE.test.js...
# Environment: BANYAND, GRPC_CLIENT, BANYAN_SOURCE_DIR, E2E_TIME_SCALE (see lib/daemon.js).
# Uses tests/e2e/.node's Node.js when tools/setup.sh fetched one (the system's was older than
# 20). Exits 77 (ctest SKIP_RETURN_CODE) with a message when Node.js >= 20 or the npm packages
# (tests/e2e/node_modules, from `npm ci --prefix tests/e2e`) are missing; with
# E2E_REQUIRE_PACKAGES=1, missing packages exit 1 (only a missing Node.js skips).
case "$0" in */*) here=${0%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd)
# The Node.js 20 runtime tools/setup.sh fetches where the system's is older, if there.
for n in "$here"/.node/node_modules/node-linux-*/bin/node; do
  if [ -x "$n" ]; then PATH="${n%/node}:$PATH"; export PATH; fi
done
if ! command -v node >/dev/null 2>&1; then
  echo "e2e: SKIPPED: node is not installed (Debian: apt-get install nodejs npm)"
  exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
  echo "e2e: SKIPPED: node $(node --version) is too old; the tests need Node.js 20 or newer"
  exit 77
fi
for pkg in openai @grpc/grpc-js @grpc/proto-loader; do
  if [ ! -f "$here/node_modules/$pkg/package.json" ]; then
    # The agent-framework tests (E2E_REQUIRE_PACKAGES=1) fail instead: a client that did not
    # install is what they check.
    if [ "${E2E_REQUIRE_PACKAGES:-0}" = 1 ]; then
      echo "e2e: FAILED: $here/node_modules/$pkg is missing; run: npm ci --prefix tests/e2e"
      exit 1
    fi
    echo "e2e: SKIPPED: $here/node_modules/$pkg is missing; run: npm ci --prefix tests/e2e"
    exit 77
  fi
done
cd "$here" || exit 1
exec node --test --test-reporter=spec "$@"
