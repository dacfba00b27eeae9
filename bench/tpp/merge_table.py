#!/usr/bin/env python3
"""Merges tpp_bench and torch_attention_reference.py JSON lines (one run on the GPU machine) into one
Markdown table: banyan tpp / paged against the floor and the PyTorch references.

Usage: merge_table.py BENCH_JSONL TORCH_JSONL
"""
import json
import sys


def load(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except FileNotFoundError:
        pass
    return rows


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def main():
    bench = load(sys.argv[1])
    torch = load(sys.argv[2])
    ceilings = next((r for r in torch if "copy_TBps_rw" in r), {})
    device = next((r for r in bench if r.get("bench") == "tpp_device"), {})
    ref = {}
    for r in torch:
        if "persq_sdpa_us" in r or "hydragen_torch_us" in r:
            ref[(r["B"], r["Hq"], r["Hkv"], r["d"], r["prefix"], r["suffix"])] = r
    cases = {}
    order = []
    for r in bench:
        if r.get("bench") != "tpp":
            continue
        key = (r["case"], r["B"], r["Hq"], r["Hkv"], r["d"], r["prefix"], r["suffix"], r["share"])
        if key not in cases:
            cases[key] = {}
            order.append(key)
        cases[key][r["mode"]] = r

    print(f"device: {device.get('name', '?')}, {device.get('sms', '?')} SMs; "
          f"torch ceilings: copy {fmt(ceilings.get('copy_TBps_rw'), 2)} TB/s (r+w), "
          f"bf16 GEMM {fmt(ceilings.get('bf16_gemm_TFLOPs'), 0)} TFLOP/s\n")
    print("| case | B | q/kv heads | d | shared | private | floor us | tpp us | paged us | "
          "tpp TB/s | tpp/floor | tpp/paged | persq_sdpa us | hydragen_torch us | "
          "persq/tpp | hydragen/tpp |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in order:
        name, b, hq, hkv, d, p, s, share = key
        m = cases[key]
        t = m.get("tpp")
        pg = m.get("paged")
        if t is None:
            continue
        # Group levels or random tails: no PyTorch reference has that tree.
        plain = not name.startswith("hier") and not t.get("levels") and not t.get("tail_min")
        tr = ref.get((b, hq, hkv, d, p, s)) if share and plain else None
        persq = tr.get("persq_sdpa_us") if tr else None
        hyd = tr.get("hydragen_torch_us") if tr else None
        shared = p if share else 0
        private = s if share else p + s
        if name.startswith("hier") and "shared_desc" not in t:  # runs before the field
            shared = f"{p}+{t.get('groups')}x1024"
            private = f"32..{s}"
        elif share and "shared_desc" in t:
            shared = t["shared_desc"]
            private = t["private_desc"]
        print(f"| {name} | {b} | {hq}/{hkv} | {d} | {shared} | {private} | "
              f"{fmt(t['floor_us'])} | {fmt(t['median_us'])} | {fmt(pg['median_us'] if pg else None)} | "
              f"{fmt(t['achieved_TBps'], 2)} | {fmt(t['median_us'] / t['floor_us'], 2)} | "
              f"{fmt(t['median_us'] / pg['median_us'] if pg else None, 2)} | {fmt(persq)} | "
              f"{fmt(hyd)} | {fmt(persq / t['median_us'] if persq else None, 1)} | "
              f"{fmt(hyd / t['median_us'] if hyd else None, 1)} |")

    modes = []
    for key in order:
        for mode in cases[key]:
            if mode not in modes:
                modes.append(mode)
    if len(modes) > 2:
        print("\nVariants (median us; p1 block M / max p1 splits / deferred merge of the run):\n")
        print("| case | B | shared | " + " | ".join(modes) + " |")
        print("|---|---|---|" + "---|" * len(modes))
        for key in order:
            m = cases[key]
            if len(m) <= 2:
                continue
            cells = []
            for mode in modes:
                r = m.get(mode)
                cells.append("-" if r is None else
                             f"{r['median_us']:.1f} (m{r['p1_block_m']}/s{r['p1_splits']}/"
                             f"{'D' if r.get('deferred') else 'F'})")
            print(f"| {key[0]} | {key[1]} | {key[5]} | " + " | ".join(cells) + " |")
    bad = [k for k in order if cases[k].get("tpp", {}).get("tpp_vs_paged_relnorm", 0) > 2e-2]
    print("\ntpp vs paged output relative norm: max "
          + fmt(max((cases[k]["tpp"]["tpp_vs_paged_relnorm"] for k in order if "tpp" in cases[k]),
                    default=None), 4)
          + ("" if not bad else f"  MISMATCH in {bad}"))


if __name__ == "__main__":
    main()
