#!/usr/bin/env python3
"""TTFT and TPOT at each rate of compare_attention.sh sweeps, side by side for several runs (a
daemon before and after a change, say): one Markdown table per workload, a row per rate, per run
the p50 / p99 TTFT, the p99 TPOT and whether the rate held the SLO, and under it each run's
maximum sustainable rate.

  python3 bench/serve/sweep_ttft.py LABEL=WORK_DIR [LABEL=WORK_DIR ...] [--attention tpp]

WORK_DIR is a compare_attention.sh WORK folder (its <attention>_<workload>.jsonl files).
Standard library only.
"""
import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_jsonl import read_sweep  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="LABEL=WORK_DIR")
    ap.add_argument("--attention", default="tpp")
    a = ap.parse_args()
    runs = []
    for r in a.runs:
        label, _, path = r.partition("=")
        if not path:
            ap.error(f"{r}: LABEL=WORK_DIR")
        runs.append((label, path))
    workloads = []
    for _, path in runs:
        for f in sorted(glob.glob(os.path.join(path, f"{a.attention}_*.jsonl"))):
            w = os.path.basename(f)[len(a.attention) + 1:-len(".jsonl")]
            if w not in workloads:
                workloads.append(w)
    for w in workloads:
        data = [read_sweep(os.path.join(p, f"{a.attention}_{w}.jsonl")) for _, p in runs]
        rates = sorted({s["arrivals"]["request_rate"] for _, steps in data for s in steps})
        print(f"\n{w} ({a.attention}):\n")
        head = "| req/s | " + " | ".join(
            f"{l} TTFT p50 / p99 ms | {l} TPOT p99 ms | {l} held" for l, _ in runs) + " |"
        print(head)
        print("|---" * (1 + 3 * len(runs)) + "|")
        for rate in rates:
            cells = []
            for _, steps in data:
                s = next((x for x in steps if x["arrivals"]["request_rate"] == rate), None)
                if s is None:
                    cells += ["-", "-", "-"]
                    continue
                held = (s["ttft_ms"]["p99"] <= s["slo"]["ttft_ms"] and
                        s["tpot_ms"]["p99"] <= s["slo"]["tpot_ms"] and
                        s.get("failed", 0) == 0)
                cells += [f"{s['ttft_ms']['p50']:,.0f} / {s['ttft_ms']['p99']:,.0f}",
                          f"{s['tpot_ms']['p99']:.1f}", "yes" if held else "no"]
            print(f"| {rate:g} | " + " | ".join(cells) + " |")
        best = []
        for (label, _), (summary, _) in zip(runs, data):
            m = summary.get("max_sustainable_rate") if summary else None
            best.append(f"{label} {m:g}" if m is not None else f"{label} none")
        print("\nmax sustainable req/s: " + ", ".join(best))


if __name__ == "__main__":
    main()
