#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention (flash backend) on the prefill shapes of
bench/prefill_attention_bench.cc: one prompt of L tokens, causal, bf16, the whole prompt in one
call (compare with prefill_attention_bench --step-tokens 0). GQA's K/V heads are repeated to the
query heads before timing (the FLOPs are the same). Median of --reps CUDA-event timings after a
warm-up; FLOPs 2 * head_dim * L * (L + 1) per query head, as the bench counts them.

  python3 bench/prefill_sdpa.py [--lengths 2048,8192,16384,32768] [--q-heads 32] [--kv-heads 8]
                                [--head-dim 128] [--reps 10]
"""
import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="2048,8192,16384,32768")
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    g = a.q_heads // a.kv_heads
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, SDPA flash backend, "
          f"{a.q_heads} q / {a.kv_heads} kv heads, head_dim {a.head_dim}, bf16, causal\n")
    print("| tokens | SDPA flash ms | TFLOP/s |\n|---|---|---|")
    for n in (int(x) for x in a.lengths.split(",")):
        torch.manual_seed(0)
        q = torch.randn(1, a.q_heads, n, a.head_dim, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, a.kv_heads, n, a.head_dim, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        times = []
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            for r in range(a.reps + 1):
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
                e1.record()
                torch.cuda.synchronize()
                if r > 0:
                    times.append(e0.elapsed_time(e1))
        times.sort()
        ms = times[len(times) // 2]
        flops = 2.0 * a.head_dim * n * (n + 1) * a.q_heads
        print(f"| {n} | {ms:.2f} | {flops / (ms * 1e-3) / 1e12:.0f} |")


if __name__ == "__main__":
    main()
