#!/usr/bin/env bash
# Builds banyan's container images with podman (buildah underneath) on Debian and checks that
# they serve. Not part of the test suite (CI has no container engine).
#   docker/containers.sh cpu      build docker/Dockerfile as banyan:cpu, then smoke-test it
#   docker/containers.sh cuda     build docker/Dockerfile.cuda as banyan:cuda, then smoke-test
#                                 it on the GPU (podman --device nvidia.com/gpu=all: CDI)
#   docker/containers.sh cpu --no-build    smoke-test an image built before
# Set-up on Debian 12: apt-get install podman buildah (debootstrap too, see below).
#
# The smoke test runs the image as a daemon and checks, from outside the container: the health
# check turns healthy; a completion; a streaming chat completion (SSE ending in [DONE]); gRPC
# health SERVING (the image's banyan-grpc-client); SIGTERM (podman stop) ends it with exit 0,
# timed. It prints the image's size. Any failure exits non-zero with the container's log.
#
# Hosts that restrict containers (a VM without CAP_SYS_RESOURCE, hybrid cgroups, where crun
# fails with "setrlimit ... Operation not permitted" or "cgroups in hybrid mode not supported"):
#   BANYAN_PODMAN_ARGS="--runtime runc" BANYAN_ULIMITS="nofile=20000:20000 nproc=4096:4096"
# (apt-get install runc; limits no higher than the shell's `ulimit -Hn` / conmon's).
#
# Base images come from Docker Hub by default. Where the registry cannot be reached, the script
# builds a Debian 12 base with debootstrap from the Debian mirror and imports it as
# localhost/banyan-debian:12 (BANYAN_LOCAL_BASE=1 forces that).
set -euo pipefail
cd "$(dirname "$0")/.."

kind="${1:-cpu}"
build=1
[ "${2:-}" = "--no-build" ] && build=0
case "$kind" in
  cpu) dockerfile=docker/Dockerfile ;;
  cuda) dockerfile=docker/Dockerfile.cuda ;;
  *) echo "usage: $0 cpu|cuda [--no-build]" >&2; exit 2 ;;
esac
image="localhost/banyan:$kind"
engine_bin="${CONTAINER_ENGINE:-podman}"
command -v "$engine_bin" >/dev/null || { echo "$engine_bin not found: apt-get install podman buildah" >&2; exit 2; }
read -r -a engine_args <<< "${BANYAN_PODMAN_ARGS:-}"
engine() { "$engine_bin" "${engine_args[@]}" "$@"; }
engine=engine
ulimit_args=()
for u in ${BANYAN_ULIMITS:-}; do ulimit_args+=(--ulimit "$u"); done

log() { echo "[containers] $*"; }

# A local Debian 12 base image, from the Debian mirror (no container registry needed).
local_base() {
  local tag=localhost/banyan-debian:12
  if "$engine" image exists "$tag" 2>/dev/null; then echo "$tag"; return; fi
  command -v debootstrap >/dev/null || { echo "debootstrap not found: apt-get install debootstrap" >&2; exit 2; }
  local dir
  dir=$(mktemp -d)
  log "building $tag with debootstrap (minbase, bookworm)" >&2
  debootstrap --variant=minbase bookworm "$dir/rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >&2
  rm -rf "$dir/rootfs/var/cache/apt/archives/"*.deb "$dir/rootfs/var/lib/apt/lists/"*
  tar -C "$dir/rootfs" -c . | "$engine" import --change 'CMD ["/bin/bash"]' - "$tag" >&2
  rm -rf "$dir"
  echo "$tag"
}

if [ "$build" = 1 ]; then
  build_args=()
  if [ "${BANYAN_LOCAL_BASE:-0}" = 1 ] || ! "$engine" pull -q docker.io/library/debian:12-slim >/dev/null 2>&1; then
    base=$(local_base)
    log "registry unreachable (or BANYAN_LOCAL_BASE=1): base image $base"
    build_args=(--build-arg "DEBIAN_IMAGE=$base" --build-arg "RUNTIME_IMAGE=$base")
  fi
  log "building $image from $dockerfile (nice 15)"
  start=$(date +%s)
  nice -n 15 "$engine_bin" "${engine_args[@]}" build --format docker "${ulimit_args[@]}" \
    -f "$dockerfile" -t "$image" "${build_args[@]}" .
  log "built in $(( $(date +%s) - start )) s"
fi

size=$("$engine" image inspect --format '{{.Size}}' "$image")
log "image $image: $(( size / 1000000 )) MB"

name="banyan-smoke-$kind-$$"
run_args=(-d --name "$name" -p 127.0.0.1::8000 -p 127.0.0.1::50051 "${ulimit_args[@]}")
[ "$kind" = cuda ] && run_args+=(--device nvidia.com/gpu=all)
cleanup() { "$engine" rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
fail() {
  echo "[containers] FAILED: $*" >&2
  "$engine" logs "$name" >&2 || true
  exit 1
}

"$engine" run "${run_args[@]}" "$image" >/dev/null
http_port=$("$engine" port "$name" 8000/tcp | head -n1 | sed 's/.*://')
grpc_port=$("$engine" port "$name" 50051/tcp | head -n1 | sed 's/.*://')
log "container $name: HTTP 127.0.0.1:$http_port, gRPC 127.0.0.1:$grpc_port"

# The image's own health check (curl /health inside the container), as an orchestrator runs it.
healthy=0
for _ in $(seq 1 120); do
  if "$engine" healthcheck run "$name" >/dev/null 2>&1; then healthy=1; break; fi
  sleep 1
done
[ "$healthy" = 1 ] || fail "the health check did not pass within 120 s"
log "health check: healthy"
curl -fsS "http://127.0.0.1:$http_port/ready" >/dev/null || fail "/ready"

model=$(curl -fsS "http://127.0.0.1:$http_port/v1/models" | sed 's/.*"id":"\([^"]*\)".*/\1/')
completion=$(curl -fsS "http://127.0.0.1:$http_port/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$model\",\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0}") ||
  fail "completion"
echo "$completion" | grep -q '"text":"' || fail "completion without text: $completion"
log "completion: $(echo "$completion" | sed 's/.*"text":"\([^"]*\)".*/\1/')"

stream=$(curl -fsSN "http://127.0.0.1:$http_port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"A story\"}],\"max_tokens\":16,\"stream\":true}") ||
  fail "streaming chat"
events=$(echo "$stream" | grep -c '^data: {' || true)
echo "$stream" | tail -n 3 | grep -q '^data: \[DONE\]' || fail "streaming chat did not end with [DONE]"
[ "$events" -ge 2 ] || fail "streaming chat sent $events events"
log "streaming chat: $events events, then [DONE]"

grpc_health=$("$engine" exec "$name" /opt/banyan/bin/banyan-grpc-client --addr 127.0.0.1:50051 --health) ||
  fail "gRPC health"
echo "$grpc_health" | grep -q SERVING || fail "gRPC health: $grpc_health"
log "gRPC health (banyan-grpc-client in the container): $grpc_health"
if [ "$kind" = cuda ]; then
  "$engine" logs "$name" 2>&1 | grep -q "backend cuda" || fail "the CUDA image did not choose the CUDA backend"
fi

start_ms=$(( $(date +%s%N) / 1000000 ))
"$engine" stop -t 60 "$name" >/dev/null
stop_ms=$(( $(date +%s%N) / 1000000 - start_ms ))
code=$("$engine" inspect --format '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || fail "exit code $code after SIGTERM (expected 0)"
"$engine" logs "$name" 2>&1 | grep -q "draining" || fail "no drain in the log after SIGTERM"
log "SIGTERM: drained and exited 0 in ${stop_ms} ms"
log "OK: $image ($(( size / 1000000 )) MB) serves completions, streaming chat and gRPC health, and stops cleanly"
