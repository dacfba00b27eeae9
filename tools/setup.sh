#!/usr/bin/env bash
# Installs what banyan needs on Debian 12 (only the missing packages), then configures and
# builds into ./build. Idempotent: a second run only rebuilds what changed.
#   tools/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libspdlog-dev nlohmann-json3-dev libsentencepiece-dev sentencepiece libcpp-httplib-dev
  libgtest-dev libgmock-dev libopenblas-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# End-to-end test clients (tests/e2e): Node.js and the npm packages of its lock file (the
# official openai client, @grpc/grpc-js). Debian 12's nodejs is 18; the e2e tests need >= 20 and
# skip themselves, saying so, on an older one.
if ! command -v node >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
if command -v npm >/dev/null 2>&1 &&
   { [ ! -d tests/e2e/node_modules ] || [ tests/e2e/package-lock.json -nt tests/e2e/node_modules ]; }; then
  npm ci --prefix tests/e2e --ignore-scripts --no-audit --no-fund --loglevel=error ||
    echo "[setup] npm ci failed: the e2e tests will skip themselves"
  touch tests/e2e/node_modules 2>/dev/null || true
fi

JOBS="${BANYAN_JOBS:-$(nproc)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BANYAN_BUILD_TYPE:-Release}" "$@"
cmake --build build -j "$JOBS"
