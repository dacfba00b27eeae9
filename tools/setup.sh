#!/usr/bin/env bash
# Installs what banyan needs on Debian 12 (only the missing packages), then configures and
# builds into ./build. Idempotent: a second run only rebuilds what changed.
#   tools/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config git
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

JOBS="${BANYAN_JOBS:-$(nproc)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BANYAN_BUILD_TYPE:-Release}" "$@"
cmake --build build -j "$JOBS"
