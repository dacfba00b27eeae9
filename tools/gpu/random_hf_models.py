# Writes random-weight Hugging Face models of the four architectures banyan loads (Llama 3 with
# llama3 RoPE, Qwen 2.5, Qwen 3 with head_dim != dim / heads, Mistral), each with a random Hydra
# head set in banyan's format (docs/hydra.md) beside it: heads.json + heads.safetensors. Head
# dims: 16 for Llama 3 and Qwen 2.5 (the generic attention kernels), 128 for Qwen 3 and 64 for
# Mistral (the templated tensor-core kernels, those a real model runs).
#   python3 tools/gpu/random_hf_models.py OUT_DIR      (needs torch, transformers, numpy)
import json, os, struct, sys
import numpy as np
import torch
import transformers as T
out = sys.argv[1]
torch.manual_seed(0)
common = dict(vocab_size=512, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
              bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5)
archs = {
  "llama3": (T.LlamaConfig, T.LlamaForCausalLM, dict(tie_word_embeddings=True, rope_theta=500000.0,
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 128})),
  "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, dict(tie_word_embeddings=True)),
  "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, dict(tie_word_embeddings=False, head_dim=128)),
  "mistral": (T.MistralConfig, T.MistralForCausalLM, dict(tie_word_embeddings=False, head_dim=64)),
}
def write_st(path, tensors):
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes; blobs.append(a.tobytes())
    header["__metadata__"] = {"format": "banyan-draft-heads", "kind": "hydra"}
    h = json.dumps(header).encode(); h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); [f.write(b) for b in blobs]
for name, (C, M, extra) in archs.items():
    d = os.path.join(out, name); os.makedirs(d, exist_ok=True)
    cfg = C(**common, **extra)
    model = M(cfg)
    with torch.no_grad():
        for p in model.parameters(): p.normal_(0, 0.3 if p.dim() > 1 else 0.05)
        for n, p in model.named_parameters():
            if "norm" in n: p.fill_(1.0)
    model.save_pretrained(d, safe_serialization=True)
    rng = np.random.default_rng(1); dim, hid, nh = 64, 128, 3
    tensors, heads = {}, []
    for i in range(nh):
        ins = (i + 2) * dim
        t = {f"heads.{i}.fc1.weight": rng.normal(0, 0.1, (hid, ins)), f"heads.{i}.fc1.bias": rng.normal(0, 0.1, hid),
             f"heads.{i}.fc2.weight": rng.normal(0, 0.1, (dim, hid)), f"heads.{i}.fc2.bias": rng.normal(0, 0.1, dim)}
        tensors.update(t)
        heads.append({"index": i, "predicts": f"x[t+{i+2}]", "inputs": ["hidden"] + [f"embed(x[t+{k+1}])" for k in range(i + 1)],
                      "input_size": ins, "tensors": {k: list(v.shape) for k, v in t.items()}})
    write_st(os.path.join(d, "heads.safetensors"), tensors)
    json.dump({"format": "banyan-draft-heads", "format_version": 1, "kind": "hydra", "tensors_file": "heads.safetensors",
               "dtype": "F32", "base_model": {"dim": 64, "hidden_dim": 172, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
               "vocab_size": 512, "tie_embeddings": extra["tie_word_embeddings"]},
               "num_heads": nh, "dim": dim, "mlp_hidden": hid, "activation": "silu", "hidden_state": "final_norm_output",
               "embedding": "base_tok_embeddings", "output_projection": "base_lm_head", "residual": "hidden",
               "heads": heads}, open(os.path.join(d, "heads.json"), "w"))
    print(name, "written", flush=True)
