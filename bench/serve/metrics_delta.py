"""What bench/serve's scripts read after a load: the last JSON line of a banyan_serve_bench
report, and the change of banyand's /metrics counters between two scrapes (Prometheus text,
one `name value` per line, a labelled series under its name with its labels; comments and
lines whose value is not a number are skipped)."""
import json


def read_metrics(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith('#') or ' ' not in line:
                continue
            key, value = line.split()[:2]
            try:
                out[key] = float(value)
            except ValueError:
                continue
    return out


def delta(before_path, after_path):
    """A function of a counter's name: its value after minus before (0 where absent)."""
    a, b = read_metrics(before_path), read_metrics(after_path)
    return lambda key: b.get(key, 0.0) - a.get(key, 0.0)


def last_report(path):
    with open(path) as f:
        return json.loads(f.read().strip().splitlines()[-1])
