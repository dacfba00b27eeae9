"""Draft heads (Hydra: sequentially dependent; Medusa: independent) and their file format.

Notation: the base model has just verified token x_t; h_t [dim] is its final-RMSNorm hidden
state at x_t (the vector its LM head multiplies) and x_{t+1} = argmax LM(h_t) is the base
model's own next token. Head i (0-based) drafts x_{t+2+i}:

  Hydra  head i:  u = [h_t ; E[x_{t+1}] ; ... ; E[x_{t+1+i}]]    ((i + 2) * dim inputs)
  Medusa head i:  u = h_t                                          (dim inputs)
  z = h_t + W2 silu(W1 u + b1) + b2     (a 2-layer MLP, mlp_hidden wide, residual onto h_t)
  logits = LM_head(z)          (the base model's classifier, frozen; no norm before it)

E is the base model's token-embedding table (frozen); for a Hydra tree the x's after x_{t+1}
are the draft tokens on the path to the node being expanded. W1 is [mlp_hidden, input],
W2 [dim, mlp_hidden], row-major (the PyTorch Linear convention: y = W u + b). W2 and b2 start
at zero, so an untrained head is the base model's LM head. docs/hydra.md specifies the files.
"""
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

FORMAT = "banyan-draft-heads"
FORMAT_VERSION = 1
KINDS = ("hydra", "medusa")


def tensor_name(head, layer, what):
    return f"heads.{head}.{layer}.{what}"


LAYERS = ("fc1", "fc2")


class DraftHeads(torch.nn.Module):
    def __init__(self, kind, num_heads, mlp_hidden, dim):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind}")
        self.kind, self.num_heads, self.mlp_hidden, self.dim = kind, num_heads, mlp_hidden, dim
        self.heads = torch.nn.ModuleList()
        for i in range(num_heads):
            head = torch.nn.ModuleDict({"fc1": torch.nn.Linear(self.input_size(i), mlp_hidden),
                                        "fc2": torch.nn.Linear(mlp_hidden, dim)})
            torch.nn.init.zeros_(head["fc2"].weight)
            torch.nn.init.zeros_(head["fc2"].bias)
            self.heads.append(head)

    def input_size(self, head):
        return (head + 2) * self.dim if self.kind == "hydra" else self.dim

    def head_state(self, head, hidden, prefix_emb=None):
        """hidden: [..., dim]; prefix_emb (Hydra only): [..., head + 1, dim], the embeddings of
        x_{t+1} .. x_{t+1+head}. Returns z [..., dim], to be multiplied by the LM head."""
        if self.kind == "hydra":
            u = torch.cat((hidden, prefix_emb.flatten(-2)), dim=-1)
        else:
            u = hidden
        head = self.heads[head]
        return hidden + head["fc2"](F.silu(head["fc1"](u)))

    def state_tensors(self):
        out = {}
        for i, head in enumerate(self.heads):
            for layer in LAYERS:
                for what in ("weight", "bias"):
                    out[tensor_name(i, layer, what)] = getattr(head[layer], what).detach()
        return out

    def load_tensors(self, tensors):
        for name, p in self.state_tensors().items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"{name}: shape {list(t.shape)}, expected {list(p.shape)}")
            with torch.no_grad():
                p.copy_(t)

    def config(self, base_config, base_file, base_sha256, tensors_file, training=None):
        """The JSON config that names everything a loader needs (docs/hydra.md)."""
        heads = []
        for i in range(self.num_heads):
            inputs = ["hidden"]
            if self.kind == "hydra":
                inputs += [f"embed(x[t+{k}])" for k in range(1, i + 2)]
            tensors = {name: list(t.shape) for name, t in self.state_tensors().items()
                       if name.startswith(f"heads.{i}.")}
            heads.append({"index": i, "predicts": f"x[t+{i + 2}]", "inputs": inputs,
                          "input_size": self.input_size(i), "tensors": tensors})
        cfg = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            "tensors_file": tensors_file,
            "dtype": "F32",
            "base_model": dict(base_config, file=base_file, sha256=base_sha256),
            "num_heads": self.num_heads,
            "dim": self.dim,
            "mlp_hidden": self.mlp_hidden,
            "activation": "silu",
            "hidden_state": "final_norm_output",
            "embedding": "base_tok_embeddings",
            "output_projection": "base_lm_head",
            "residual": "hidden",
            "heads": heads,
        }
        if training is not None:
            cfg["training"] = training
        return cfg

    @classmethod
    def from_config(cls, cfg):
        if cfg.get("format") != FORMAT or cfg.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"not a {FORMAT} v{FORMAT_VERSION} config")
        return cls(cfg["kind"], cfg["num_heads"], cfg["mlp_hidden"], cfg["dim"])


# --- safetensors, written by hand -------------------------------------------------------------
# Debian 12 packages no Python safetensors module, and the format is small: an 8-byte
# little-endian header length N, N bytes of JSON ({name: {"dtype", "shape", "data_offsets":
# [begin, end]}, "__metadata__": {str: str}}, offsets relative to the end of the header,
# padded with spaces to a multiple of 8), then the raw little-endian tensor bytes.

def save_safetensors(path, tensors, metadata=None):
    if sys.byteorder != "little":
        raise RuntimeError("the writer assumes a little-endian host")
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu", torch.float32).contiguous()
        blob = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def load_safetensors(path):
    """Returns ({name: float32 tensor}, metadata). Only F32 is read (all that is written)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = bytearray(data[8 + n:])
    out = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: {name}: dtype {info['dtype']}, only F32 is read")
        begin, end = info["data_offsets"]
        t = torch.frombuffer(body, dtype=torch.float32, offset=begin,
                             count=(end - begin) // 4)
        out[name] = t.reshape(info["shape"]).clone()
    return out, metadata


def load_heads(config_path, device="cpu"):
    """Reads a config.json and the tensors file it names (beside it)."""
    with open(config_path) as f:
        cfg = json.load(f)
    heads = DraftHeads.from_config(cfg)
    tensors, _ = load_safetensors(os.path.join(os.path.dirname(config_path),
                                               cfg["tensors_file"]))
    heads.load_tensors(tensors)
    return heads.to(device).eval(), cfg
