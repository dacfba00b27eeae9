#!/usr/bin/env python3
"""Trains Hydra (sequentially dependent) and Medusa (independent) draft heads on a frozen
llama2.c base model, on self-distillation data the base model writes itself.

Data: --seqs prompts (BOS, BOS + a story opener, or BOS + random word pieces), each continued
to --seq-len tokens by sampling at a temperature drawn per row from --temperatures. The base
model's hidden states are kept from the same decode steps, so training never runs the base
model again except for its (tied or untied) LM head.

Loss for head i at position t (drafting x[t+2+i]), summed over heads, averaged over positions
whose target the base model wrote (not prompt tokens):
  ce_weight * CE(head logits, x[t+2+i]) + kl_weight * KL(p_base(. | x[..t+1+i]) || p_head)
where x[t+2+i] is the token the base model sampled there and p_base is its full distribution
at that position (Hydra++'s teacher loss). Both kinds train on the same data, with the same
optimizer (AdamW, cosine decay) and the same seed.

Deterministic for a given --seed, machine, device kind and thread count (--threads).

usage: train_heads.py [--model stories260K.bin] [--tokenizer tok512.bin] [--out-dir DIR]
                      [--kinds hydra,medusa] [--seed N] [--device auto|cpu|cuda] ...
"""
import argparse
import json
import math
import os
import platform
import re
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heads import DraftHeads, save_safetensors  # noqa: E402
from llama2c import Llama2c, Tokenizer, file_sha256, pick_device  # noqa: E402
from selfdistill import generate, make_prompts  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_MODEL = os.path.join(REPO, "models", "stories260K", "stories260K.bin")
DEFAULT_TOKENIZER = os.path.join(REPO, "models", "stories260K", "tok512.bin")
DEFAULT_OUT = os.path.join(REPO, "models", "stories260K", "hydra")
# Output names per kind: (tensors file, config file).
OUTPUT_NAMES = {"hydra": ("heads.safetensors", "config.json"),
                "medusa": ("medusa.safetensors", "medusa_config.json")}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL, help="llama2.c .bin checkpoint")
    p.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, help="llama2.c tokenizer .bin")
    p.add_argument("--out-dir", default=DEFAULT_OUT)
    p.add_argument("--kinds", default="hydra,medusa")
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--mlp-hidden", type=int, default=128, help="hidden width of each head's MLP")
    p.add_argument("--seqs", type=int, default=1024, help="self-generated training sequences")
    p.add_argument("--seq-len", type=int, default=192, help="tokens per sequence, prompt incl.")
    p.add_argument("--temperatures", default="0.3,0.6,0.9",
                   help="sampling temperature per sequence, drawn uniformly from this list")
    p.add_argument("--val-seqs", type=int, default=64,
                   help="sequences of the same data held out to report validation accuracy")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=16, help="sequences per optimizer step")
    p.add_argument("--lr", type=float, default=2e-2)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--ce-weight", type=float, default=1.0)
    p.add_argument("--kl-weight", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: leave as is)")
    p.add_argument("--gen-batch", type=int, default=256, help="rows per generation batch")
    return p.parse_args(argv)


def shown_arg(arg):
    """A command-line argument as recorded in the config: paths relative to the repository,
    other machines' paths left out."""
    if not arg.startswith("/"):
        return arg
    rel = os.path.relpath(arg, REPO)
    return rel if not rel.startswith("..") else "<path>"


def dump_json(obj):
    """Indented JSON with short lists of numbers (shapes) kept on one line."""
    text = json.dumps(obj, indent=2)
    return re.sub(r"\[\s*([-\d.e, \n]+?)\s*\]",
                  lambda m: "[" + ", ".join(m.group(1).replace(",", " ").split()) + "]",
                  text) + "\n"


def set_determinism(seed, threads):
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if torch.backends.cudnn.is_available():
        torch.backends.cudnn.benchmark = False
    if hasattr(torch.backends, "cuda") and hasattr(torch.backends.cuda, "matmul"):
        torch.backends.cuda.matmul.allow_tf32 = False


def make_data(base, tokenizer, args, device, n, seed):
    """Self-generated sequences: tokens [n, seq_len], hidden [n, seq_len, dim], and a mask
    [n, seq_len] that is True where the token was written by the base model (not prompt)."""
    g = torch.Generator().manual_seed(seed)
    prompts = make_prompts(tokenizer, n, g, base.config.vocab_size)
    temps = [float(x) for x in args.temperatures.split(",")]
    temperature = torch.tensor(temps)[torch.randint(len(temps), (n,), generator=g)]
    tokens, prompt_len, hidden = generate(base, prompts, args.seq_len, temperature,
                                          seed=seed, batch=args.gen_batch, device=device,
                                          want_hidden=True)
    written = torch.arange(args.seq_len)[None, :] >= prompt_len[:, None]
    return tokens, hidden, written


def head_losses(heads, base, tokens, hidden, written, ce_weight, kl_weight):
    """Per-head (loss, top-1 accuracy vs the sampled token, positions) on one batch.

    tokens [B, T], hidden [B, T, dim], written [B, T] bool; all on the training device.
    """
    T = tokens.shape[1]
    emb = F.embedding(tokens, base.tok_embeddings)
    with torch.no_grad():  # teacher: the base model's distribution at every position
        teacher = F.log_softmax(hidden @ base.lm_head.T, dim=-1)
    out = []
    for i in range(heads.num_heads):
        n = T - 2 - i  # positions t = 0 .. n-1 have a target x[t+2+i]
        h = hidden[:, :n]
        prefix = None
        if heads.kind == "hydra":
            prefix = torch.stack([emb[:, 1 + j:1 + j + n] for j in range(i + 1)], dim=2)
        logp = F.log_softmax(heads.head_state(i, h, prefix) @ base.lm_head.T, dim=-1)
        target = tokens[:, 2 + i:2 + i + n]
        t_logp = teacher[:, 1 + i:1 + i + n]
        mask = written[:, 2 + i:2 + i + n].float()
        # one-hot, not gather: gather's CUDA backward is a non-deterministic scatter-add
        ce = -(logp * F.one_hot(target, logp.shape[-1])).sum(-1)
        kl = (t_logp.exp() * (t_logp - logp)).sum(-1)
        count = mask.sum()
        loss = ((ce_weight * ce + kl_weight * kl) * mask).sum() / count
        acc = ((logp.argmax(-1) == target).float() * mask).sum() / count
        out.append((loss, acc.item(), count.item()))
    return out


def train_kind(kind, base, data, val, args, device, log):
    torch.manual_seed(args.seed)
    heads = DraftHeads(kind, args.num_heads, args.mlp_hidden, base.config.dim).to(device)
    tokens, hidden, written = data
    n = tokens.shape[0]
    steps_per_epoch = math.ceil(n / args.batch)
    total_steps = steps_per_epoch * args.epochs
    opt = torch.optim.AdamW(heads.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    for epoch in range(args.epochs):
        order = torch.randperm(n, generator=gen).to(device)
        run_loss, run_steps = 0.0, 0
        for s in range(steps_per_epoch):
            rows = order[s * args.batch:(s + 1) * args.batch]
            losses = head_losses(heads, base, tokens[rows], hidden[rows], written[rows],
                                 args.ce_weight, args.kl_weight)
            loss = sum(l for l, _, _ in losses)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run_loss += loss.item()
            run_steps += 1
        val_acc = evaluate(heads, base, val, args, device)
        log(f"[{kind}] epoch {epoch + 1}/{args.epochs}: train loss {run_loss / run_steps:.4f}, "
            f"val top-1 per head " + " ".join(f"{a:.3f}" for a in val_acc) +
            f" ({time.time() - t0:.0f} s)")
    return heads, val_acc, time.time() - t0


@torch.no_grad()
def evaluate(heads, base, val, args, device):
    tokens, hidden, written = val
    accs = torch.zeros(heads.num_heads)
    counts = torch.zeros(heads.num_heads)
    for b0 in range(0, tokens.shape[0], args.batch):
        rows = slice(b0, b0 + args.batch)
        res = head_losses(heads, base, tokens[rows], hidden[rows], written[rows],
                          args.ce_weight, args.kl_weight)
        for i, (_, acc, count) in enumerate(res):
            accs[i] += acc * count
            counts[i] += count
    return (accs / counts).tolist()


def main(argv=None):
    args = parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    device = pick_device(args.device)
    set_determinism(args.seed, args.threads)
    os.makedirs(args.out_dir, exist_ok=True)
    log_lines = []

    def log(msg):
        print(msg, flush=True)
        log_lines.append(msg)

    start = time.time()
    base = Llama2c(args.model).to(device).eval()
    tokenizer = Tokenizer(args.tokenizer)
    log(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"seed {args.seed}")
    t0 = time.time()
    data = make_data(base, tokenizer, args, device, args.seqs + args.val_seqs, args.seed)
    train = tuple(x[:args.seqs].to(device) for x in data)
    val = tuple(x[args.seqs:].to(device) for x in data)
    gen_s = time.time() - t0
    log(f"generated {args.seqs} + {args.val_seqs} sequences x {args.seq_len} tokens "
        f"({int(train[2].sum())} training targets written by the model) in {gen_s:.0f} s")

    base_json = base.config.to_json()
    base_sha = file_sha256(args.model)
    for kind in kinds:
        heads, val_acc, train_s = train_kind(kind, base, train, val, args, device, log)
        tensors_file, config_file = OUTPUT_NAMES[kind]
        training = {
            "command": "tools/hydra/train_heads.py " + " ".join(
                shown_arg(a) for a in (argv if argv is not None else sys.argv[1:])),
            "seed": args.seed, "seqs": args.seqs, "seq_len": args.seq_len,
            "val_seqs": args.val_seqs, "temperatures": args.temperatures,
            "epochs": args.epochs, "batch": args.batch, "lr": args.lr,
            "ce_weight": args.ce_weight, "kl_weight": args.kl_weight,
            "generation_seconds": round(gen_s, 1), "training_seconds": round(train_s, 1),
            "val_top1_per_head": [round(a, 4) for a in val_acc],
            "torch": torch.__version__, "device": str(device),
            "threads": torch.get_num_threads(), "machine": platform.machine(),
        }
        save_safetensors(os.path.join(args.out_dir, tensors_file), heads.state_tensors(),
                         {"format": "banyan-draft-heads", "kind": kind})
        cfg = heads.config(base_json, os.path.basename(args.model), base_sha, tensors_file,
                           training)
        with open(os.path.join(args.out_dir, config_file), "w") as f:
            f.write(dump_json(cfg))
        params = sum(t.numel() for t in heads.state_tensors().values())
        log(f"[{kind}] wrote {tensors_file} ({params} parameters) and {config_file}")
    log(f"total {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
