#!/usr/bin/env bash
# Builds the CUDA tests and benchmark on a machine without a GPU (nvcc is enough) and packs them
# for a GPU machine that cannot build banyan itself (no abseil, say). On a GPU machine that can,
# skip this: build there and run tools/gpu/device_run.sh with BIN_DIR (docs/gpu.md).
#
#   tools/gpu/run_on_gpu.sh            # build + pack, then print how to run it on the GPU machine
#
# Steps:
#  1. configure and build Release, sm_90, into build-gpu/ (-j2): every GPU test binary
#     (GPU_TESTS: tests/kernels/cuda and tests/engine/cuda), gpu_decode_bench, and for the speculation and
#     served checks banyan, banyand and banyan_serve_bench (banyand needs the server's packages:
#     tools/setup.sh);
#  2. copy them (stripped) plus the shared libraries `ldd` lists -- except libc, libm,
#     libstdc++, libgcc_s, ld-linux, the CUDA driver and the CUDA toolkit's libraries, which the
#     GPU machine has in /usr/local/cuda/lib64 -- into .gpu/bundle.tar.xz (git-ignored);
#  3. print how to run it on the GPU machine: copy this checkout with .gpu/ there and run
#     tools/gpu/device_run.sh from its top folder. It unpacks the bundle and runs every step with
#     LD_LIBRARY_PATH=<bundle>/lib:/usr/local/cuda/lib64 (see its header), leaving logs and the
#     summary in $OUT (default /tmp/banyan-gpu-out).
#
#   BUILD_DIR=build tools/gpu/run_on_gpu.sh   # reuse an existing CUDA-on build folder instead
#
# The build folder must have been configured from this checkout (an older build-gpu/ made from
# the former overlay top level is wiped and configured again).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${BUILD_DIR:-$root/build-gpu}
case $build in /*) ;; *) build=$root/$build ;; esac
if [[ -f $build/CMakeCache.txt ]] &&
  ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$build/CMakeCache.txt"; then
  echo "run_on_gpu.sh: $build was configured from another source folder; configuring it again"
  rm -rf "$build"
fi
# Kept in step with TOOLS of tools/gpu/device_run.sh; the tests are tools/gpu/gpu_tests.list.
mapfile -t GPU_TESTS <"$root/tools/gpu/gpu_tests.list"
TOOLS=(gpu_decode_bench banyan banyand banyan_serve_bench)
# Machine code for the GPU: a tree that tools/test.sh configured on a machine without one holds
# PTX only (BANYAN_CUDA_PTX_ONLY), and is configured again.
# The compilers of every Release build (tools/compiler.sh); a tree built with others is
# configured again.
source "$root/tools/compiler.sh"
if [[ ! -f $build/CMakeCache.txt ]] ||
  grep -qx -e 'BANYAN_SERVER:BOOL=OFF' -e 'BANYAN_CUDA_PTX_ONLY:BOOL=ON' \
    "$build/CMakeCache.txt" ||
  ! grep -qx "CMAKE_CXX_COMPILER:FILEPATH=$banyan_cxx" "$build/CMakeCache.txt"; then
  cmake -S "$root" -B "$build" -G Ninja "${BANYAN_COMPILER_ARGS[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DBANYAN_SERVER=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBANYAN_CUDA_PTX_ONLY=OFF >/dev/null
fi
ninja -C "$build" -j2 "${GPU_TESTS[@]}" "${TOOLS[@]}"

if [[ -d .git ]]; then
  grep -qxs '/.gpu/' .git/info/exclude || echo '/.gpu/' >>.git/info/exclude
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${GPU_TESTS[@]}" "${TOOLS[@]}"; do
  bin=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [[ -n $bin ]] || { echo "run_on_gpu.sh: $t was not built in $build" >&2; exit 1; }
  cp "$bin" "$stage/bin/"
done
strip "$stage"/bin/*
ldd "$stage"/bin/* | awk '/=>/ { print $3 }' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda|libcublas|libcublasLt|libcudart|libdl|libpthread|librt)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
rm -rf .gpu
mkdir -p .gpu
# Each binary holds the same CUDA kernels (about 30 MB of fatbins, linked statically), so the
# dictionary spans several binaries and xz stores those once: 21 MiB instead of over 60 (2026-12-06, 10 binaries).
tar -cf - -C "$stage" bin lib | xz -6 --lzma2=dict=256MiB >.gpu/bundle.tar.xz
echo "packed .gpu/bundle.tar.xz: $(du -h .gpu/bundle.tar.xz | cut -f1) ($(find "$stage/lib" -type f | wc -l) libraries)"
cat <<'RUN'

On the GPU machine (a copy of this checkout with .gpu/ in it), from its top folder:
  OUT=gpu-logs bash tools/gpu/device_run.sh
RUN
