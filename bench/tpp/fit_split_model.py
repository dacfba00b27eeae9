#!/usr/bin/env python3
"""Fits the phase-1 split model's two latencies (kernels/cuda/tpp/tpp_work_plan.cc: kCtaSeconds,
kMergeRoundSeconds) to `tpp_bench --sweep` runs with forced split counts (modes tpp_k<N>).

The model is a copy of TppWorkPlan::Build's estimate for one shared segment with one-token tails
(the cases of the sweep). For each parameter pair on a grid it picks the split count as Build
does and scores the pick by the measured time at that count over the best measured count
(cases whose pick was not measured get the slower of their measured neighbours). Keep the copy
in step with tpp_work_plan.cc.

Usage: fit_split_model.py SWEEP_JSONL...
"""
import itertools
import json
import math
import sys

SMS, BW, WAVE = 132, 3.6e12, 1e-6
MERGE_AHEAD, MIN_SPLIT = 4, 128


def estimate(b, hq, hkv, p, k, cta_s, round_s, d=128):
    m = b * (hq // hkv)
    block_m = 128 if m >= 128 else 64
    occ, rate = (1, 460e12) if block_m == 128 else (2, 360e12)
    tiles = math.ceil(m / block_m)
    seg_bytes = 4.0 * p * hkv * d
    seg_flops = 4.0 * math.ceil(m / 16) * 16 * p * d * hkv
    partial = k * b * hq * (4.0 * d + 4)
    items = k * tiles * hkv
    capacity = SMS * occ
    item_time = max(seg_bytes / (k * hkv) / (BW / capacity),
                    seg_flops / (k * tiles * hkv) / (rate / capacity))
    mem_util = min(1.0, items / capacity)
    waves = math.ceil(items / capacity)
    flop_util = items / (waves * capacity)
    rounds = math.ceil(k / MERGE_AHEAD) if k > 1 else 0
    return (max((seg_bytes + partial) / (BW * mem_util), seg_flops / (rate * flop_util), item_time)
            + items / capacity * cta_s + partial / BW + rounds * round_s + waves * WAVE)


def pick(b, hq, hkv, p, cta_s, round_s):
    best_k, best = 1, estimate(b, hq, hkv, p, 1, cta_s, round_s)
    for k in range(2, 65):
        if math.ceil(p / k) < MIN_SPLIT:
            break
        t = estimate(b, hq, hkv, p, k, cta_s, round_s)
        if t < best * 0.97:
            best_k, best = k, t
    return best_k


def main(paths):
    cases = {}
    for path in paths:
        for line in open(path):
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if j.get("bench") != "tpp" or not j["mode"].startswith("tpp_k") or j["suffix"] != 1:
                continue
            key = (j["case"], j["B"], j["Hq"], j["Hkv"], j["prefix"])
            cases.setdefault(key, {})[j["p1_splits"]] = j["median_us"]

    def score(cta_s, round_s, show=False):
        total = 0.0
        for (name, b, hq, hkv, p), times in sorted(cases.items()):
            k = pick(b, hq, hkv, p, cta_s, round_s)
            best = min(times.values())
            if k in times:
                t = times[k]
            else:
                near = [times[a] for a in (max((a for a in times if a < k), default=None),
                                           min((a for a in times if a > k), default=None))
                        if a is not None]
                t = max(near)
            total += t / best - 1
            if show:
                print(f"{name} B={b} {hq}/{hkv} P={p}: pick {k} -> {t:.1f} us, best "
                      f"{best:.1f} at {min(times, key=times.get)}")
        return total

    grid = itertools.product([0, 1e-6, 2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 8e-6],
                             [0, 0.5e-6, 1e-6, 1.5e-6, 2e-6, 2.5e-6])
    ranked = sorted((score(c, r), c, r) for c, r in grid)
    for total, c, r in ranked[:5]:
        print(f"CTA {c * 1e6:.1f} us, merge round {r * 1e6:.1f} us: summed regret {total:.3f}")
    print("current (6.0, 1.5):")
    print(f"summed regret {score(6e-6, 1.5e-6, show=True):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
