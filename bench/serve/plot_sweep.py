#!/usr/bin/env python3
"""Plots the rate sweeps of one bench/serve/compare_attention.sh run.

    python3 bench/serve/plot_sweep.py WORK_DIR OUT_DIR [--prefix NAME_] [--title TEXT]

Reads WORK_DIR/<attention>_<workload>.jsonl (the JSON lines of banyan_serve_bench
--sweep-rates) and writes OUT_DIR/<prefix><workload>.png per workload: output throughput
(tok/s) against p99 TPOT and against p99 TTFT, one point per swept rate (labelled with it),
every attention mode on the same axes. A hollow marker is a rate that broke the SLO (whose
limits are drawn dashed); the x axes are logarithmic, since an overloaded step's TTFT grows
by orders of magnitude. Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_jsonl import read_sweep  # noqa: E402

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker
except ImportError:
    sys.exit("plot_sweep.py: matplotlib is not installed for " + sys.executable +
             " (Debian: apt-get install python3-matplotlib; or pip install matplotlib)")

FILE_RE = re.compile(r"^([a-z]+)_([a-z-]+)\.jsonl$")
STYLE = {"tpp": ("tab:green", "o"), "paged": ("tab:blue", "s")}


def load(path):
    """The sweep steps (in rate order) and the SLO of one JSONL file."""
    summary, steps = read_sweep(path)
    return steps, summary.get("slo") if summary else None


def plot_workload(workload, modes, out_path, title):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), dpi=80)
    panels = (("tpot_ms", "p99 TPOT (ms)", "tpot_ms"), ("ttft_ms", "p99 TTFT (ms)", "ttft_ms"))
    slo = None
    for mode, (steps, mode_slo) in sorted(modes.items()):
        slo = slo or mode_slo
        color, marker = STYLE.get(mode, ("tab:red", "^"))
        for ax, (field, _, _) in zip(axes, panels):
            # A step with no completed request has no latency to place on a log axis.
            shown = [s for s in steps if (s.get(field, {}).get("p99") or 0) > 0]
            xs = [s[field]["p99"] for s in shown]
            ys = [s.get("output_throughput", 0) for s in shown]
            ax.plot(xs, ys, color=color, linewidth=1, label=mode)
            for s, x, y in zip(shown, xs, ys):
                held = s.get("meets_slo", True)
                ax.plot(x, y, marker=marker, color=color,
                        markerfacecolor=color if held else "none", markersize=5)
                ax.annotate(f"{s['arrivals']['request_rate']:g}", (x, y), fontsize=6,
                            xytext=(3, 3), textcoords="offset points", color=color)
    for ax, (_, label, slo_key) in zip(axes, panels):
        if slo and slo.get(slo_key):
            ax.axvline(slo[slo_key], color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        # Ticks at 1, 2, 5 x 10^k in plain numbers, none between: a sweep often spans less
        # than a decade, where the default shows one label or crowded minor ones.
        ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel(label)
        ax.set_ylabel("output tok/s")
        ax.grid(True, which="both", linewidth=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"{title}{workload} (labels: req/s; hollow: broke the SLO, dashed)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work_dir", help="the WORK folder of a compare_attention.sh run")
    p.add_argument("out_dir", help="where the PNG files go (created if missing)")
    p.add_argument("--prefix", default="sweep_", help="file name prefix (default sweep_)")
    p.add_argument("--title", default="", help="text before the workload in each title")
    a = p.parse_args()
    by_workload = collections.defaultdict(dict)
    for name in sorted(os.listdir(a.work_dir)):
        m = FILE_RE.match(name)
        if not m:
            continue
        steps, slo = load(os.path.join(a.work_dir, name))
        if steps:
            by_workload[m.group(2)][m.group(1)] = (steps, slo)
    if not by_workload:
        sys.exit(f"plot_sweep.py: no <attention>_<workload>.jsonl with sweep steps in "
                 f"{a.work_dir}")
    os.makedirs(a.out_dir, exist_ok=True)
    for workload, modes in sorted(by_workload.items()):
        out = os.path.join(a.out_dir, f"{a.prefix}{workload}.png")
        plot_workload(workload, modes, out, a.title)
        print(out)


if __name__ == "__main__":
    main()
