#!/usr/bin/env bash
# Nsight Compute counters for the TPP kernels (clocks left as found; on a VM-hosted GPU ncu may
# lack permission for some counters).
# Usage, on the GPU machine: bash bench/tpp/profile.sh [.gpu-tpp]   -> $OUT/ncu_*.txt and a short
# summary (.gpu-tpp: the folder bench/tpp/package.sh made, or any folder holding tpp_bench).
set -u
DIR=${1:-.gpu-tpp}
OUT=${OUT:-/tmp/tpp-out}
export LD_LIBRARY_PATH="$DIR/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -z "$NCU" ] && { echo "no ncu"; exit 0; }
M=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,lts__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,lts__t_sectors_srcunit_tex_op_read.sum
M=$M,l1tex__m_xbar2l1tex_read_bytes.sum.per_second
M=$M,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active
M=$M,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
M=$M,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,smsp__warp_issue_stalled_barrier_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_wait_per_warp_active.pct
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed.sum,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
M=$M,smsp__warp_issue_stalled_sleeping_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_membar_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_misc_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_dispatch_stall_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_no_instruction_per_warp_active.pct
M=$M,smsp__warp_issue_stalled_selected_per_warp_active.pct
# TPP_PROFILE_TIMES="CASE ...": instead of the counters below, every kernel's time and grid for
# each case (`tpp_bench --only CASE --reps 3`, kernels serialised by ncu; all modes of the case
# run, so a kernel's list holds each mode's launches in the order tpp_bench runs them).
if [ -n "${TPP_PROFILE_TIMES:-}" ]; then
  for c in $TPP_PROFILE_TIMES; do
    echo "== $c"
    timeout 300 "$NCU" --csv --metrics gpu__time_duration.sum,launch__grid_size \
      "$DIR/tpp_bench" --only "$c" --reps 3 2>/dev/null | tee "$OUT/ncu_times_$c.csv" |
      python3 -c '
import collections, csv, sys
rows = list(csv.reader(l for l in sys.stdin if l.startswith("\"")))
if not rows: sys.exit(0)
h = rows[0]; k, m, v = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
d = collections.OrderedDict()
for r in rows[1:]:
    d.setdefault(r[k].split("(")[0][:60], collections.defaultdict(list))[r[m]].append(r[v])
for name, ms in d.items():
    t = ms.get("gpu__time_duration.sum", [])
    print(name, "n=%d" % len(t), "us:", " ".join("%.1f" % (float(x.replace(",", "")) / 1000) for x in t[:6]),
          "grid:", " ".join(ms.get("launch__grid_size", [])[:3]))'
  done
  exit 0
fi
prof() {  # name kernel-regex bench-filter
  timeout 120 "$NCU" --clock-control none -k "regex:$2" --launch-count 1 --metrics "$M" \
    "$DIR/tpp_bench" --only "$3" --reps 1 > "$OUT/ncu_$1.txt" 2>&1
  echo "-- $1 ($2, $3)"
  grep -E "^ +(gpu__|sm__|dram__|l1tex__|smsp__)" "$OUT/ncu_$1.txt" | awk '{printf "  %s %s\n", $1, $NF}'
}
prof p1_hydragen_b1024 TppPhase1WgmmaWsKernel hydragen_fig5_b1024
prof p1mma_hydragen_b1024 TppPhase1Kernel hydragen_fig5_b1024
[ "${TPP_PROFILE_ALL:-0}" = 1 ] || exit 0
prof p1_chunkattn_p1024 TppPhase1 chunkattn_table_b32_p1024
prof p2_chunkattn_p1024 TppPhase2 chunkattn_table_b32_p1024
prof p2_noshare_hydragen TppPhase2 noshare_hydragen_b64
