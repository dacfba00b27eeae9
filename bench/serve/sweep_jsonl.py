"""Reads one banyan_serve_bench --sweep-rates JSONL file: the sweep summary line and the steps.

Shared by compare_attention.sh (its table) and plot_sweep.py (its plots); standard library only.
"""
import json


def read_sweep(path):
    """(summary or None, steps sorted by request rate); a file that is absent gives (None, [])."""
    summary, steps = None, []
    try:
        f = open(path)
    except FileNotFoundError:
        return summary, steps
    with f:
        for line in f:
            if not line.strip():
                continue
            j = json.loads(line)
            if j.get("type") == "sweep":
                summary = j
            elif "sweep_step" in j:
                steps.append(j)
    steps.sort(key=lambda j: j["arrivals"]["request_rate"])
    return summary, steps
