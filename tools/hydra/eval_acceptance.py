#!/usr/bin/env python3
"""Offline acceptance of draft heads under greedy speculative decoding.

Held-out data: --seqs prompts drawn like the training prompts but from --seed (not the
training seed), each continued by a sampled prefix of 0..--prefix-max tokens at temperature 1
(so that rows differ), then --gen-len tokens of the base model's greedy continuation.

A verification step at position t (x_t the last accepted token, h_t its hidden state): the
root is the base model's own token x_{t+1}; depth d of the candidate tree holds b_d children
per node, the top-b_d tokens of head d-1 (for Hydra conditioned on the node's path, for Medusa
the same top-b_d under every parent). Greedy verification accepts the longest tree path equal
to the base model's greedy continuation x_{t+2}, x_{t+3}, ...; the step yields accepted + 1
tokens (the +1 is the base model's own token, which every step produces) and the next step
starts at t + accepted + 1. Because greedy verification reproduces the greedy continuation
exactly, the walk over the precomputed continuation is exact.

Reported per head kind and tree: mean tokens per step, the share of steps accepting at least
d draft tokens, and the per-depth acceptance rate P(accepted >= d | accepted >= d - 1).

usage: eval_acceptance.py [--heads CONFIG ...] [--trees 4,2,2 1,1,1,1] [--seed N] ...
"""
import argparse
import json
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heads import load_heads  # noqa: E402
from llama2c import Llama2c, Tokenizer, pick_device  # noqa: E402
from selfdistill import generate, make_prompts  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL_DIR = os.path.join(REPO, "models", "stories260K")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=os.path.join(MODEL_DIR, "stories260K.bin"))
    p.add_argument("--tokenizer", default=os.path.join(MODEL_DIR, "tok512.bin"))
    p.add_argument("--heads", nargs="+",
                   default=[os.path.join(MODEL_DIR, "hydra", "config.json"),
                            os.path.join(MODEL_DIR, "hydra", "medusa_config.json")],
                   help="head config files (each names its tensors file beside it)")
    p.add_argument("--trees", nargs="+", default=["4,2,2", "1,1,1,1"],
                   help="branching per depth; 1,1,... is a single chain")
    p.add_argument("--seqs", type=int, default=128)
    p.add_argument("--prefix-max", type=int, default=32)
    p.add_argument("--gen-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=1001, help="differs from the training seed")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--example", metavar="TEXT",
                   help="only print, for this prompt, the base model's next token and each "
                        "head set's chain and depth-1 top-4 drafts (reference values for "
                        "another implementation)")
    return p.parse_args(argv)


@torch.no_grad()
def show_example(base, tokenizer, loaded, text, device):
    ids = tokenizer.encode(text)
    hidden, logits = base(torch.tensor([ids], device=device))
    h, root = hidden[:, -1], logits[:, -1].argmax(-1)
    print(f"prompt {text!r}: ids {ids}; base next token {root.item()} "
          f"({tokenizer.pieces[root.item()]!r})")
    for heads, cfg in loaded:
        chain = [t[0, 0].item() for t, _ in draft_tree(heads, base, h, root,
                                                        [1] * heads.num_heads)]
        top4 = draft_tree(heads, base, h, root, [4])[0][0][0].tolist()
        print(f"  {cfg['kind']}: chain {chain} {[tokenizer.pieces[t] for t in chain]}; "
              f"depth-1 top-4 {top4}")


@torch.no_grad()
def draft_tree(heads, base, hidden, root, branching):
    """hidden [P, dim], root [P] (the base model's own next token). Returns per depth
    (tokens [P, n_d], parent [n_d]): node j of depth d hangs under node parent[j] of depth d-1
    (depth 0 is the root alone)."""
    P = hidden.shape[0]
    paths = torch.zeros(P, 1, 0, dtype=torch.long, device=hidden.device)  # tokens after root
    levels = []
    for d, b in enumerate(branching):
        n_prev = paths.shape[1]
        if heads.kind == "hydra":
            prefix = torch.cat((root[:, None, None].expand(P, n_prev, 1), paths), dim=2)
            z = heads.head_state(d, hidden[:, None].expand(P, n_prev, hidden.shape[1]),
                                 F.embedding(prefix, base.tok_embeddings))
        else:
            z = heads.head_state(d, hidden)[:, None].expand(P, n_prev, hidden.shape[1])
        top = (z @ base.lm_head.T).topk(b, dim=-1).indices  # [P, n_prev, b]
        tokens = top.reshape(P, n_prev * b)
        parent = torch.arange(n_prev, device=hidden.device).repeat_interleave(b)
        paths = torch.cat((paths[:, parent], tokens[..., None]), dim=2)
        levels.append((tokens, parent))
    return levels


def accepted_lengths(levels, target):
    """target [P, depth]: x_{t+2} ... Returns the accepted draft tokens per position [P]."""
    P = target.shape[0]
    alive = torch.ones(P, 1, dtype=torch.bool, device=target.device)
    acc = torch.zeros(P, dtype=torch.long, device=target.device)
    for d, (tokens, parent) in enumerate(levels):
        alive = alive[:, parent] & (tokens == target[:, d:d + 1])
        acc += alive.any(-1).long()
    return acc


def walk(acc_at, start, gen_len):
    """acc_at [N, T] accepted lengths per position; start [N] the first step's t per row.
    Returns the accepted count of every step, rows concatenated."""
    steps = []
    for r in range(acc_at.shape[0]):
        t, end = int(start[r]), int(start[r]) + gen_len
        row = acc_at[r].tolist()
        while t < end:
            steps.append(row[t])
            t += row[t] + 1
    return torch.tensor(steps)


def summarize(steps, depth):
    at_least = [(steps >= d).float().mean().item() for d in range(depth + 1)]
    return {
        "steps": int(steps.numel()),
        "tokens_per_step": (steps.float() + 1).mean().item(),
        "share_accepting_at_least": at_least[1:],
        "acceptance_rate_per_depth": [at_least[d] / at_least[d - 1] if at_least[d - 1] else 0.0
                                      for d in range(1, depth + 1)],
    }


def main(argv=None):
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    t0 = time.time()
    base = Llama2c(args.model).to(device).eval()
    tokenizer = Tokenizer(args.tokenizer)
    loaded = [load_heads(path, device) for path in args.heads]
    trees = [[int(b) for b in t.split(",")] for t in args.trees]
    max_depth = max(len(t) for t in trees)
    for heads, cfg in loaded:
        if heads.num_heads < max_depth:
            raise SystemExit(f"{cfg['kind']} has {heads.num_heads} heads, a tree needs "
                             f"{max_depth}")

    if args.example is not None:
        show_example(base, tokenizer, loaded, args.example, device)
        return

    g = torch.Generator().manual_seed(args.seed)
    prompts = make_prompts(tokenizer, args.seqs, g, base.config.vocab_size)
    prompt_len = torch.tensor([len(p) for p in prompts])
    greedy_from = prompt_len + torch.randint(0, args.prefix_max + 1, (args.seqs,), generator=g)
    total_len = int(greedy_from.max()) + args.gen_len + max_depth + 2
    tokens, _, hidden = generate(base, prompts, total_len, torch.ones(args.seqs), greedy_from,
                                 seed=args.seed, device=device, want_hidden=True)
    gen_s = time.time() - t0
    start = greedy_from - 1  # h at the last sampled token predicts the first greedy one

    # Every position a walk can visit: t in [start, start + gen_len).
    rows = torch.arange(args.seqs).repeat_interleave(args.gen_len)
    ts = (start[:, None] + torch.arange(args.gen_len)[None, :]).reshape(-1)
    h = hidden[rows, ts].to(device)
    root = tokens[rows, ts + 1].to(device)
    target = torch.stack([tokens[rows, ts + 2 + d] for d in range(max_depth)], 1).to(device)

    results = {}
    for heads, cfg in loaded:
        for tree in trees:
            acc = accepted_lengths(draft_tree(heads, base, h, root, tree), target[:, :len(tree)])
            acc_at = torch.zeros(args.seqs, total_len, dtype=torch.long)
            acc_at[rows, ts] = acc.cpu()
            name = f"{cfg['kind']} [{','.join(map(str, tree))}]"
            res = summarize(walk(acc_at, start, args.gen_len), len(tree))
            nodes, width = 0, 1
            for b in tree:
                width *= b
                nodes += width
            res["tree_nodes"] = nodes
            results[name] = res
    elapsed = time.time() - t0

    print(f"held-out: {args.seqs} sequences, greedy continuation of {args.gen_len} tokens after "
          f"a sampled prefix of 0..{args.prefix_max}, seed {args.seed}; torch {torch.__version__}"
          f" on {device} ({torch.get_num_threads()} threads); {gen_s:.0f} s generation, "
          f"{elapsed:.0f} s total")
    print("| heads [tree] | draft nodes | steps | tokens/step | acceptance per depth "
          "(P(acc>=d | acc>=d-1)) | share of steps with acc>=d |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['tree_nodes']} | {r['steps']} | {r['tokens_per_step']:.3f} | "
              + " / ".join(f"{x:.3f}" for x in r["acceptance_rate_per_depth"]) + " | "
              + " / ".join(f"{x:.3f}" for x in r["share_accepting_at_least"]) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seqs": args.seqs, "gen_len": args.gen_len, "seed": args.seed,
                       "torch": torch.__version__, "device": str(device),
                       "machine": platform.machine(), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
