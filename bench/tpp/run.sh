#!/usr/bin/env bash
# Runs on the GPU machine, in one go: the GPU tests, the TPP microbenchmark, the PyTorch reference
# (torch_attention_reference.py, which needs PyTorch with CUDA), the SASS / resource facts, and
# prints one Markdown table. Logs and the table go to $OUT (default /tmp/tpp-out).
#
# Expects a folder (default .gpu-tpp) made by bench/tpp/package.sh: tpp_bench, tpp_gpu_test,
# tpp_work_plan_test, torch_attention_reference.py, merge_table.py, lib/. On a GPU machine that
# builds banyan itself, from the repo root:
#   cmake -S . -B build-tpp -G Ninja -DCMAKE_BUILD_TYPE=Release -DBANYAN_SERVER=OFF \
#     -DCMAKE_CUDA_ARCHITECTURES=90
#   ninja -C build-tpp tpp_bench tpp_gpu_test tpp_work_plan_test wgmma_rate
#   bench/tpp/package.sh build-tpp .gpu-tpp
#   bash bench/tpp/run.sh .gpu-tpp [bench args]
# (package.sh strips and copies; copying the folder to another GPU machine works the same way.)
# `tpp_bench --dry-run` prints every case's floor without a GPU.
set -u
DIR=${1:-.gpu-tpp}
shift || true
OUT=${OUT:-/tmp/tpp-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$DIR/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"

echo "== tests"
"$DIR/tpp_work_plan_test" --gtest_brief=1 2>&1 | tail -4 | tee "$OUT/tests.txt"
timeout ${TPP_TEST_TIMEOUT:-150} "$DIR/tpp_gpu_test" --gtest_brief=1 2>&1 | tail -40 | tee -a "$OUT/tests.txt"

echo "== SASS of the phase-1 kernels (tensor-core instructions per kernel)"
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass "$DIR/tpp_bench" | awk '/Function :/{f=$3} /HMMA/{h[f]++} /HGMMA/{w[f]++}
    /LDSM/{l[f]++} /LDGSTS/{g[f]++} /[^A-Z](LDL|STL)[. ]/{s[f]++}
    END{for(k in l) if (h[k] + w[k] > 0) printf "%s HMMA=%d HGMMA=%d LDSM=%d LDGSTS=%d local=%d\n",
      k, h[k], w[k], l[k], g[k], s[k]+0}' \
    | sort | tee "$OUT/sass.txt"
fi

echo "== benchmark"
timeout ${TPP_BENCH_TIMEOUT:-400} "$DIR/tpp_bench" "$@" | tee "$OUT/bench.jsonl"

echo "== torch reference"
if [[ -f $DIR/torch_attention_reference.py ]]; then
  timeout ${TPP_TORCH_TIMEOUT:-200} python3 "$DIR/torch_attention_reference.py" | tee "$OUT/torch.jsonl"
else
  echo "(not packed: the table has no PyTorch columns)"
  : >"$OUT/torch.jsonl"
fi

echo "== table"
python3 "$DIR/merge_table.py" "$OUT/bench.jsonl" "$OUT/torch.jsonl" | tee "$OUT/table.md"
