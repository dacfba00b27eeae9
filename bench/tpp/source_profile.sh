#!/usr/bin/env bash
# Source-level stall sampling (Nsight Compute SourceCounters) of one TPP kernel on one case
# (default: the warp-specialised phase-1 kernel on the Hydragen B=1024 case); prints the SASS
# lines with the most stall samples and the executed instructions per opcode. Usage, on the GPU
# machine, with the folder bench/tpp/package.sh made (or any folder holding tpp_bench):
#   OUT=... [KERNEL=regex] [CASE=tpp_bench --only value] bash bench/tpp/source_profile.sh [.gpu-tpp]
# e.g. KERNEL=TppPhase1WgmmaKernel CASE=chunkattn_table_b32_p1024 (the one-warpgroup kernel).
set -u
DIR=${1:-.gpu-tpp}
OUT=${OUT:-/tmp/tpp-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$DIR/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -z "$NCU" ] && { echo "no ncu"; exit 0; }
timeout 150 "$NCU" --clock-control none --set none --section SourceCounters \
  --section WarpStateStats -k "regex:${KERNEL:-WgmmaWsKernel}" --launch-count 1 -f -o "$OUT/prof" \
  "$DIR/tpp_bench" --only "${CASE:-hydragen_fig5_b1024}" --reps 1 >"$OUT/ncu_run.txt" 2>&1
timeout 120 "$NCU" -i "$OUT/prof.ncu-rep" --page source --csv --print-source sass >"$OUT/src.csv"
python3 - "$OUT/src.csv" <<'PY'
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[1]  # rows[0] names the kernel
samp, src, ex = (hdr.index(n) for n in
                 ("Warp Stall Sampling (All Samples)", "Source", "Instructions Executed"))
data = []
for r in rows[2:]:
    try:
        data.append((float(r[samp].replace(",", "")), float(r[ex].replace(",", "") or 0), r[src]))
    except (ValueError, IndexError):
        pass
total = sum(d[0] for d in data) or 1
print("top stall lines:")
for v, _, s in sorted(data, key=lambda d: -d[0])[:25]:
    print(f"  {100 * v / total:5.1f}%  {s[:100]}")
ops = collections.Counter()
for _, e, s in data:
    ops[(s.split()[1] if s.startswith("@") else s.split()[0]).split(".")[0]] += e
print("executed instructions by opcode:")
for op, e in ops.most_common(20):
    print(f"  {op:12s} {e:.3g}")
PY
