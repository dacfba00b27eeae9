#!/usr/bin/env python3
"""PyTorch references for the TPP microbenchmark's serving-regime cases (bench/tpp/cases.cc,
issue 15): run on the GPU machine in the same call as tpp_bench so that ratios come from one run.

For each case: decode attention of B rows (one query token each) over a shared prefix tree and a
private tail per row, bf16, timed as the median of CUDA-graph replays with L2 flushed before each
(as tpp_bench and the shared reference script do):
  persq_sdpa   every row attends to its own full copy of the context (torch SDPA, flash or
               memory-efficient backend; skipped when the copies exceed 60 GB);
  hydragen     the Hydragen algorithm in PyTorch, generalised to a tree: each level's prefixes
               attended once per group with the group's query heads folded into the query
               dimension, the tails per row, all merged by log-sum-exp.
Tails are a fixed length per case; where tpp_bench spreads them over 1..64 tokens, this uses 32
(their mean is 32.5). Prints one JSON object per line, then a Markdown table.
  python3 bench/tpp/torch_serving_cases.py [--only SUBSTRING]
"""
import argparse
import json

import torch
import torch.nn.functional as F

DEV = "cuda"


def bench(fn, iters=30, warm=5):
    flush = torch.empty(256 << 20, dtype=torch.int8, device=DEV)
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    times.sort()
    return times[len(times) // 2]


def flash_lse(q, k, v):
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False)[:2]
    return out, lse


def merge(parts):
    m = parts[0][1]
    for _, l in parts[1:]:
        m = torch.maximum(m, l)
    num, den = 0, 0
    for o, l in parts:
        w = (l - m).exp()
        num = num + o.float() * w.unsqueeze(-1)
        den = den + w
    return num / den.unsqueeze(-1)


def run_case(name, B, hq, hkv, d, levels, tail):
    """levels: [(groups, length)], outermost first; groups divide B."""
    g = hq // hkv
    q = torch.randn(B, hq, 1, d, dtype=torch.bfloat16, device=DEV)
    kv = [(torch.randn(G, hkv, L, d, dtype=torch.bfloat16, device=DEV),
           torch.randn(G, hkv, L, d, dtype=torch.bfloat16, device=DEV)) for G, L in levels]
    tk = torch.randn(B, hkv, tail, d, dtype=torch.bfloat16, device=DEV)
    tv = torch.randn(B, hkv, tail, d, dtype=torch.bfloat16, device=DEV)
    context = sum(L for _, L in levels) + tail
    row = {"case": name, "B": B, "q_heads": hq, "kv_heads": hkv, "d": d,
           "levels": levels, "tail": tail, "context": context}

    def level_attention(G, k, v):
        R = B // G
        qb = q.reshape(G, R, hkv, g, d).permute(0, 2, 1, 3, 4).reshape(G, hkv, R * g, d)
        o, l = flash_lse(qb.contiguous(), k, v)
        o = o.reshape(G, hkv, R, g, d).permute(0, 2, 1, 3, 4).reshape(B, hq, 1, d)
        l = l.reshape(G, hkv, R, g).permute(0, 2, 1, 3).reshape(B, hq, 1)
        return o, l

    tke = tk.repeat_interleave(g, dim=1) if g > 1 else tk
    tve = tv.repeat_interleave(g, dim=1) if g > 1 else tv

    def hydragen():
        parts = [level_attention(G, k, v) for (G, _), (k, v) in zip(levels, kv)]
        parts.append(flash_lse(q, tke, tve))
        return merge(parts)

    row["hydragen_torch_us"] = bench(hydragen)
    full_bytes = B * context * hkv * d * 2 * 2
    if full_bytes < 60e9:
        ks, vs = [tk], [tv]
        for (G, _), (k, v) in zip(reversed(levels), reversed(kv)):
            ks.insert(0, k.repeat_interleave(B // G, dim=0))
            vs.insert(0, v.repeat_interleave(B // G, dim=0))
        K, V = torch.cat(ks, dim=2), torch.cat(vs, dim=2)
        del ks, vs
        backends = [torch.nn.attention.SDPBackend.FLASH_ATTENTION,
                    torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION]
        with torch.nn.attention.sdpa_kernel(backends):
            row["persq_sdpa_us"] = bench(lambda: F.scaled_dot_product_attention(q, K, V, enable_gqa=True))
            ref = F.scaled_dot_product_attention(q, K, V, enable_gqa=True).float()
        row["hydragen_rel_err"] = ((hydragen() - ref).norm() / ref.norm()).item()
        del K, V
    else:
        row["persq_sdpa_us"] = None
    print(json.dumps(row), flush=True)
    del q, kv, tk, tv, tke, tve
    torch.cuda.empty_cache()
    return row


def cases():
    cs = []
    for p in (2048, 16384):
        cs.append((f"mha7b_tail1_b1024_p{p}", 1024, 32, 32, 128, [(1, p)], 1))
        cs.append((f"mha7b_tail64_b1024_p{p}", 1024, 32, 32, 128, [(1, p)], 64))
    for b in (256, 1024):
        for p in (2048, 16384):
            cs.append((f"llama3_8b_tail32_b{b}_p{p}", b, 32, 8, 128, [(1, p)], 32))
    cs.append(("tree_4x4x2x2_b64_p2048", 64, 32, 8, 128,
               [(1, 2048), (4, 1024), (16, 512), (32, 256)], 32))
    return cs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    rows = [run_case(*c) for c in cases() if args.only in c[0]]
    print("\n| case | B | q/kv heads | context | hydragen_torch us | persq_sdpa us | hydragen rel err |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ps = "-" if r["persq_sdpa_us"] is None else f"{r['persq_sdpa_us']:.1f}"
        err = f"{r['hydragen_rel_err']:.1e}" if "hydragen_rel_err" in r else "-"
        print(f"| {r['case']} | {r['B']} | {r['q_heads']}/{r['kv_heads']} | {r['context']} | "
              f"{r['hydragen_torch_us']:.1f} | {ps} | {err} |")


if __name__ == "__main__":
    main()
