#!/usr/bin/env python3
"""Splits a family of tpp_bench calls into a fixed cost per call and a marginal rate.

Least-squares line through the `tpp` calls of one case family: call us against the floor's bytes
(ChunkAttention: memory-bound) or FLOPs (Hydragen: FLOP-bound). Prints the intercept (us per
call) and the slope as TB/s or TFLOP/s, with the same run's launch floor.

  python3 bench/tpp/fixed_cost.py results/tpp/h200-2026-12-02-pair-bench.jsonl
"""
import json
import sys

FAMILIES = [  # case, (B, shared prefix) points, what the floor is bound by
    ("chunkattn_table", [(32, 1024), (32, 2048), (32, 4096)], "bytes"),
    ("hydragen_fig5", [(64, 32768), (256, 32768), (1024, 32768)], "flops"),
]


def main(path):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    for r in rows:
        if r.get("bench") == "tpp_launch_floor":
            print(f"launch floor, {r['kernels']} kernel(s): {r['median_us']} us")
    calls = {(r["case"], r["B"], r["prefix"]): r for r in rows
             if r.get("bench") == "tpp" and r.get("mode") == "tpp"}
    for case, points, unit in FAMILIES:
        got = [calls[(case, b, p)] for b, p in points if (case, b, p) in calls]
        if len(got) < 2:
            continue
        xs = [r[unit] for r in got]
        ys = [r["median_us"] for r in got]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        fixed = my - slope * mx
        rate = 1.0 / (slope * 1e-6) / 1e12  # bytes or FLOPs per second, in T
        calls_txt = " / ".join(f"{y:.1f}" for y in ys)
        print(f"{case}: calls {calls_txt} us = {fixed:.1f} us + {unit} at {rate:.2f} "
              f"{'TB/s' if unit == 'bytes' else 'TFLOP/s'}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         "results/tpp/h200-2026-12-02-pair-bench.jsonl")
