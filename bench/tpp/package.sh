#!/usr/bin/env bash
# Packs what the GPU machine needs into a git-ignored folder (default .gpu-tpp): the stripped
# test and bench binaries, the shared libraries ldd lists (except libc, libm, libstdc++,
# libgcc_s, ld-linux, libcuda and CUDA's own, which the machine has), the PyTorch reference
# (torch_attention_reference.py) and the table merger.
# Usage: bench/tpp/package.sh BUILD_DIR [DEST]
set -euo pipefail
BUILD=$1
DEST=${2:-.gpu-tpp}
rm -rf "$DEST"
mkdir -p "$DEST/lib"
for b in tpp/tpp_bench gpu_tpp/tpp_gpu_test gpu_tpp/tpp_work_plan_test; do
  f=$(find "$BUILD" -path "*$b" -type f | head -1)
  cp "$f" "$DEST/"
  strip "$DEST/$(basename "$f")"
done
# wgmma_rate (the tensor cores' rate by wgmma shape) where the build has it.
if f=$(find "$BUILD" -path "*tpp/wgmma_rate" -type f | head -1) && [[ -n $f ]]; then
  cp "$f" "$DEST/" && strip "$DEST/wgmma_rate"
fi
for f in "$DEST"/tpp_*; do
  ldd "$f" | awk '/=>/{print $3}' | grep -vE 'libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libcuda\.so|libcudart' \
    | while read -r l; do cp -nL "$l" "$DEST/lib/"; done
done
cp "$(dirname "$0")/torch_attention_reference.py" "$(dirname "$0")/merge_table.py" "$DEST/"
du -sh "$DEST"
