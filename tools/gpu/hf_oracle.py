#!/usr/bin/env python3
"""The transformers oracle for the CUDA backend (run on the GPU machine, which has PyTorch and
transformers but no network).

For each of a few LlamaConfig shapes it builds LlamaForCausalLM with random weights, writes it
with save_pretrained(dir, safe_serialization=True) (fp32 safetensors + config.json: a Hugging
Face checkpoint banyan did not write), and computes float64 logits on the CPU for fixed random
token ids. Each model folder gets:
  oracle_tokens.txt   one sequence per line, space-separated token ids
  oracle_logits.bin   float32 logits, for every sequence in order, [len(sequence), vocab]
tests/gpu/backend_test.cc (MatchesTransformersOracle) loads every folder under
$BANYAN_HF_ORACLE_DIR through banyan's HF loader and compares CpuBackend and CudaBackend logits.

usage: hf_oracle.py OUT_DIR [--seed N]
"""
import argparse
import json
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    # head_dim 64, GQA 2, untied LM head
    "llama_d64_gqa2": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                           rope_theta=10000.0),
    # head_dim 128, GQA 4, tied embeddings, a non-default RoPE base
    "llama_d128_gqa4_tied": dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=1,
                                 tie_word_embeddings=True, rope_theta=500000.0),
}


def build(name, kw, out, seed):
    torch.manual_seed(seed)
    kw = dict(kw)
    theta = kw.pop("rope_theta")
    cfg = LlamaConfig(vocab_size=1000, max_position_embeddings=1024, rms_norm_eps=1e-5,
                      initializer_range=0.06, attention_bias=False, mlp_bias=False,
                      bos_token_id=1, eos_token_id=2, hidden_act="silu", rope_theta=theta, **kw)
    # transformers 5 keeps the RoPE base in rope_parameters; 4.x in rope_theta. Set both.
    if isinstance(getattr(cfg, "rope_parameters", None), dict):
        cfg.rope_parameters["rope_theta"] = theta
    cfg.rope_theta = theta
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).eval()
    head_dim = kw["hidden_size"] // kw["num_attention_heads"]
    inv_freq = model.model.rotary_emb.inv_freq.double()
    want = theta ** (-2.0 / head_dim)
    print(f"{name}: rotary inv_freq[1] = {inv_freq[1].item():.6g}, theta^(-2/d) = {want:.6g}")
    assert abs(inv_freq[1].item() - want) < 1e-6 * max(1.0, want), "RoPE base not applied"
    with torch.no_grad():  # norm weights away from 1 so that their order matters
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.uniform_(0.7, 1.3)
    folder = os.path.join(out, name)
    model.save_pretrained(folder, safe_serialization=True)
    with open(os.path.join(folder, "config.json")) as f:
        print(f"{name}/config.json:", json.dumps(json.load(f), sort_keys=True))
    model = model.double()
    gen = torch.Generator().manual_seed(seed + 1)
    seqs = [torch.randint(3, cfg.vocab_size, (n,), generator=gen).tolist() for n in (37, 80, 129)]
    with open(os.path.join(folder, "oracle_tokens.txt"), "w") as f:
        for s in seqs:
            f.write(" ".join(map(str, s)) + "\n")
    with open(os.path.join(folder, "oracle_logits.bin"), "wb") as f, torch.no_grad():
        for s in seqs:
            logits = model(torch.tensor([s])).logits[0]
            f.write(logits.to(torch.float32).contiguous().numpy().tobytes())
            print(f"{name}: sequence of {len(s)} tokens, logits rms {logits.pow(2).mean().sqrt():.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__)
    os.makedirs(args.out_dir, exist_ok=True)
    for i, (name, kw) in enumerate(SHAPES.items()):
        build(name, kw, args.out_dir, args.seed + 10 * i)


if __name__ == "__main__":
    main()
