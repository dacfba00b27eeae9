#!/usr/bin/env python3
"""PyTorch references for tpp_bench's eight shared-prefix cases (bench/tpp/cases.cc: ChunkAttention's
table, Hydragen's figure 5, its 256-token-suffix variant, the 7B shape at B = 256 / 16K), and the
device's copy and bf16 GEMM rates, in the JSON lines bench/tpp/merge_table.py reads.

Each case is decode attention: B rows of one query token, Hq query heads and Hkv KV heads of
head_dim d, over a prefix of `prefix` tokens shared by every row and a private suffix of `suffix`
tokens per row; bf16 inputs, random normal. Two references, each timed as the median of CUDA
graph replays with L2 flushed before each replay:
  persq_sdpa       torch SDPA over a copy of each row's whole context (prefix + suffix), as a
                   server without prefix sharing in attention computes it; skipped (null) when
                   the copies would take more than 60 GB;
  hydragen_torch   the Hydragen algorithm: the prefix attended once for all rows with every
                   row's query heads of one KV head stacked as queries (one flash-attention call),
                   the suffixes per row, the two merged exactly by log-sum-exp.
hyd_rel_err is the Hydragen result against persq_sdpa (relative Frobenius norm).
Floors are tpp_bench's (bench/physical_limit.h): KV bytes at 4.4 TB/s or the FLOPs at
750 TFLOP/s, whichever is longer.

Output, one JSON object per line:
  {"copy_TBps_rw": ..., "bf16_gemm_TFLOPs": ...}
  {"case", "B", "Hq", "Hkv", "d", "prefix", "suffix", "floor_mem_us", "floor_flop_us",
   "floor_us", "persq_sdpa_us", "hydragen_torch_us", "hyd_rel_err"}

  python3 bench/tpp/torch_attention_reference.py [--only SUBSTRING]
  python3 bench/tpp/torch_attention_reference.py --device cpu --tiny   # a check without a GPU

On the CPU (--device cpu) there are no graphs or events: wall-clock medians, fp32 (the CPU has no
flash kernel with a log-sum-exp output), for checking the arithmetic only; --tiny divides B and
every length by 64 (at least 1 and 16).
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

COPY_BYTES_PER_S = 4.4e12  # bench/physical_limit.h kCopyBytesPerSecond
TENSOR_FLOPS_PER_S = 750e12  # bench/physical_limit.h kTensorFlopsPerSecond
PERSQ_LIMIT_BYTES = 60e9


def cases():
    """(name, B, Hq, Hkv, d, prefix, suffix), the shared cases of bench/tpp/cases.cc in its order."""
    cs = [("chunkattn_table", 32, 32, 32, 128, p, 1) for p in (1024, 2048, 4096)]
    cs += [("hydragen_fig5", b, 8, 1, 128, 32768, 1) for b in (64, 256, 1024)]
    cs.append(("hydragen_fig5_suffix256", 256, 8, 1, 128, 32768, 256))
    cs.append(("llama7b_b256_p16k_s128", 256, 32, 32, 128, 16384, 128))
    return cs


class Timer:
    def __init__(self, device, iters):
        self.device = device
        self.iters = iters
        if device == "cuda":
            self.flush = torch.empty(256 << 20, dtype=torch.int8, device=device)

    def median_us(self, fn):
        if self.device != "cuda":
            fn()
            times = []
            for _ in range(self.iters):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
            return sorted(times)[len(times) // 2]
        # Warm up on a side stream (graph capture needs the allocator's pools settled), capture
        # one call, replay it with L2 flushed before each replay.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        times = []
        for _ in range(self.iters):
            self.flush.zero_()
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) * 1e3)
        return sorted(times)[len(times) // 2]


def attention_with_lse(q, k, v):
    """q: [N, H, M, d], k/v: [N, H, L, d] -> (out [N, H, M, d], lse [N, H, M] in fp32)."""
    if q.is_cuda:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False)[:2]
        return out, lse
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    lse = torch.logsumexp(s, dim=-1)
    out = torch.matmul(torch.softmax(s, dim=-1), v.float()).to(q.dtype)
    return out, lse


def merge(parts):
    """Exact merge of partial attentions by log-sum-exp: parts of (out [.., d], lse [..])."""
    m = parts[0][1]
    for _, lse in parts[1:]:
        m = torch.maximum(m, lse)
    num, den = 0.0, 0.0
    for out, lse in parts:
        w = torch.exp(lse - m)
        num = num + out.float() * w.unsqueeze(-1)
        den = den + w
    return num / den.unsqueeze(-1)


def ceilings(timer, device, dtype):
    n = (1 << 30) if device == "cuda" else (1 << 24)
    src = torch.empty(n, dtype=torch.int8, device=device)
    dst = torch.empty_like(src)
    copy_us = timer.median_us(lambda: dst.copy_(src))
    m = 8192 if device == "cuda" else 256
    a = torch.randn(m, m, dtype=dtype, device=device)
    b = torch.randn(m, m, dtype=dtype, device=device)
    gemm_us = timer.median_us(lambda: torch.matmul(a, b))
    return {"copy_TBps_rw": 2 * n / copy_us / 1e6, "bf16_gemm_TFLOPs": 2 * m ** 3 / gemm_us / 1e6}


def run_case(timer, device, dtype, name, B, hq, hkv, d, prefix, suffix):
    g = hq // hkv
    kv_bytes = (prefix + B * suffix) * hkv * d * 2 * 2  # K and V, 2 bytes each
    flops = 4.0 * B * hq * (prefix + suffix) * d
    row = {"case": name, "B": B, "Hq": hq, "Hkv": hkv, "d": d, "prefix": prefix, "suffix": suffix,
           "floor_mem_us": kv_bytes / COPY_BYTES_PER_S * 1e6,
           "floor_flop_us": flops / TENSOR_FLOPS_PER_S * 1e6}
    row["floor_us"] = max(row["floor_mem_us"], row["floor_flop_us"])

    q = torch.randn(B, hq, 1, d, dtype=dtype, device=device)
    pk = torch.randn(1, hkv, prefix, d, dtype=dtype, device=device)
    pv = torch.randn(1, hkv, prefix, d, dtype=dtype, device=device)
    sk = torch.randn(B, hkv, suffix, d, dtype=dtype, device=device)
    sv = torch.randn(B, hkv, suffix, d, dtype=dtype, device=device)
    # The suffix call runs per row with the KV heads repeated to the query heads.
    ske = sk.repeat_interleave(g, dim=1) if g > 1 else sk
    sve = sv.repeat_interleave(g, dim=1) if g > 1 else sv

    def hydragen():
        # Every row's g query heads of KV head h become B x g queries against the one prefix.
        qp = q.reshape(B, hkv, g, d).permute(1, 0, 2, 3).reshape(1, hkv, B * g, d).contiguous()
        po, pl = attention_with_lse(qp, pk, pv)
        po = po.reshape(hkv, B, g, d).permute(1, 0, 2, 3).reshape(B, hq, 1, d)
        pl = pl.reshape(hkv, B, g).permute(1, 0, 2).reshape(B, hq, 1)
        return merge([(po, pl), attention_with_lse(q, ske, sve)])

    row["hydragen_torch_us"] = timer.median_us(hydragen)
    full_bytes = B * (prefix + suffix) * hkv * d * 2 * 2
    if full_bytes <= PERSQ_LIMIT_BYTES:
        k = torch.cat([pk.expand(B, -1, -1, -1), sk], dim=2)
        v = torch.cat([pv.expand(B, -1, -1, -1), sv], dim=2)
        if g > 1:
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)

        def persq():
            return F.scaled_dot_product_attention(q, k, v)

        row["persq_sdpa_us"] = timer.median_us(persq)
        ref = persq().float()
        row["hyd_rel_err"] = ((hydragen() - ref).norm() / ref.norm()).item()
        del k, v
    else:
        row["persq_sdpa_us"] = None
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="B and lengths / 64 (checks, not timings)")
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_attention_reference.py: no CUDA device (--device cpu checks the math)")
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    torch.manual_seed(0)
    timer = Timer(args.device, args.iters if args.device == "cuda" else 3)
    print(json.dumps(ceilings(timer, args.device, dtype)), flush=True)
    for name, b, hq, hkv, d, p, s in cases():
        if args.only not in name:
            continue
        if args.tiny:
            b, p, s = max(1, b // 64), max(16, p // 64), max(1, s // 64)
        print(json.dumps(run_case(timer, args.device, dtype, name, b, hq, hkv, d, p, s)),
              flush=True)


if __name__ == "__main__":
    main()
