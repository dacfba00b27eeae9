#!/usr/bin/env python3
"""The transformers oracle for the CPU and CUDA backends (run on the GPU machine, which has
PyTorch and transformers but no network).

For each model below it builds a transformers model of that architecture with random weights
(LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM; biases and norm
weights randomised too, since transformers initialises them to 0 / 1), writes it with
save_pretrained(dir, safe_serialization=True) (fp32 safetensors + config.json: a Hugging Face
checkpoint banyan did not write), and computes float64 logits on the CPU for fixed random token
ids. Each model folder gets:
  oracle_tokens.txt   one sequence per line, space-separated token ids
  oracle_logits.bin   float32 logits, for every sequence in order, [len(sequence), vocab]
tests/engine/cuda/backend_test.cc (MatchesTransformersOracle) loads every folder under
$BANYAN_HF_ORACLE_DIR through banyan's HF loader, compares CpuBackend (fp32) and CudaBackend
(bf16, fp16) logits with these, prints a table of max abs / relative errors, and fails past its
tolerances. tools/gpu/device_run.sh runs both steps.

usage: hf_oracle.py OUT_DIR [--seed N] [--only NAME,...]
"""
import argparse
import json
import math
import os

import torch
import transformers

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0,
                  # small, so that every band (kept, blended, divided) holds frequencies
                  "original_max_position_embeddings": 64}

# name: (transformers model class name, config class name, config arguments)
MODELS = {
    # head_dim 64, GQA 2, untied LM head
    "llama_d64_gqa2": ("LlamaForCausalLM", "LlamaConfig",
                       dict(hidden_size=256, intermediate_size=688, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=2,
                            tie_word_embeddings=False, rope_theta=10000.0)),
    # head_dim 128, GQA 4, tied embeddings, a non-default RoPE base
    "llama_d128_gqa4_tied": ("LlamaForCausalLM", "LlamaConfig",
                             dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=1,
                                  tie_word_embeddings=True, rope_theta=500000.0)),
    # Llama 3.1: llama3 RoPE scaling, tied embeddings, a list of eos ids
    "llama3_scaled_tied": ("LlamaForCausalLM", "LlamaConfig",
                           dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2,
                                tie_word_embeddings=True, rope_theta=500000.0,
                                rope_scaling=LLAMA3_SCALING, eos_token_id=[2, 5, 7])),
    # Qwen 2.5: q/k/v biases, tied embeddings
    "qwen2_bias_tied": ("Qwen2ForCausalLM", "Qwen2Config",
                        dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2,
                             tie_word_embeddings=True, rope_theta=1000000.0,
                             use_sliding_window=False)),
    # Qwen 3: per-head q/k RMSNorm, head_dim 128 != 256 / 4
    "qwen3_qknorm_hd128": ("Qwen3ForCausalLM", "Qwen3Config",
                           dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                                tie_word_embeddings=False, rope_theta=1000000.0,
                                use_sliding_window=False, attention_bias=False)),
    # Mistral v0.3: Llama-like, sliding_window null
    "mistral_gqa4": ("MistralForCausalLM", "MistralConfig",
                     dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                          num_attention_heads=8, num_key_value_heads=2, sliding_window=None,
                          tie_word_embeddings=False, rope_theta=1000000.0)),
}


def expected_inv_freq(theta, head_dim, scaling):
    """inv_freq by the definitions (default RoPE; Llama 3.1's rule when scaling is given)."""
    out = []
    for i in range(head_dim // 2):
        f = theta ** (-2.0 * i / head_dim)
        if scaling:
            length = scaling["original_max_position_embeddings"]
            lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
            ratio = length * f / (2 * math.pi)  # periods within the original context
            keep = 1.0 if ratio > hi else 0.0 if ratio < lo else (ratio - lo) / (hi - lo)
            f = keep * f + (1 - keep) * f / scaling["factor"]
        out.append(f)
    return torch.tensor(out, dtype=torch.float64)


def build(name, spec, out, seed):
    torch.manual_seed(seed)
    model_cls = getattr(transformers, spec[0])
    config_cls = getattr(transformers, spec[1])
    kw = dict(spec[2])
    theta = kw.pop("rope_theta")
    scaling = kw.pop("rope_scaling", None)
    kw.setdefault("eos_token_id", 2)
    cfg = config_cls(vocab_size=1000, max_position_embeddings=1024, rms_norm_eps=1e-5,
                     initializer_range=0.06, bos_token_id=1, hidden_act="silu",
                     rope_theta=theta, **kw)
    # transformers 5 keeps RoPE settings in rope_parameters; 4.x in rope_theta / rope_scaling.
    if isinstance(getattr(cfg, "rope_parameters", None), dict):
        cfg.rope_parameters["rope_theta"] = theta
        if scaling:
            cfg.rope_parameters.update(scaling)
    cfg.rope_theta = theta
    if scaling and not isinstance(getattr(cfg, "rope_parameters", None), dict):
        cfg.rope_scaling = dict(scaling)
    cfg._attn_implementation = "eager"
    model = model_cls(cfg).eval()
    head_dim = kw.get("head_dim") or kw["hidden_size"] // kw["num_attention_heads"]
    inv_freq = model.model.rotary_emb.inv_freq.double()
    want = expected_inv_freq(theta, head_dim, scaling)
    err = (inv_freq - want).abs().max().item() / want.abs().max().item()
    print(f"{name}: rotary inv_freq max rel diff from the definition {err:.2g}"
          f" ({'llama3 scaling' if scaling else 'unscaled'})")
    assert err < 1e-5, "RoPE base / scaling not applied as configured"
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:  # norm weights away from 1 so that their order matters
                p.uniform_(0.7, 1.3)
            elif pname.endswith(".bias"):  # transformers initialises biases to zero
                p.normal_(0.0, 0.5)
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
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    args = ap.parse_args()
    print("torch", torch.__version__, "transformers", transformers.__version__)
    os.makedirs(args.out_dir, exist_ok=True)
    only = [n for n in args.only.split(",") if n]
    for n in only:
        if n not in MODELS:
            raise SystemExit(f"unknown model {n}; have {', '.join(MODELS)}")
    for i, (name, spec) in enumerate(MODELS.items()):
        if not only or name in only:
            build(name, spec, args.out_dir, args.seed + 10 * i)


if __name__ == "__main__":
    main()
