#!/usr/bin/env python3
"""Checks the PyTorch base model (llama2c.py) against banyan: the greedy continuation of each
prompt must be the same text as `banyan generate --temperature 0` prints.

banyan runs all prompts as one batch (--prompts-file; it prints one completion per line with
newlines escaped) with the SentencePiece model (tok512.model); the Python side encodes with
its own BPE over tok512.bin, decodes greedily with a KV cache and stops at EOS as banyan does.
Where the Python sentencepiece module is installed, the prompt ids are also compared with it.

usage: check_base.py --banyan PATH/TO/banyan [--max-tokens 128] [--prompt TEXT ...]
exit status 0 when every prompt matches.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama2c import EOS_ID, Llama2c, Tokenizer  # noqa: E402
from selfdistill import generate  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL_DIR = os.path.join(REPO, "models", "stories260K")
PROMPTS = ["Once upon a time", "", "The little dog ran to the park.", "Lily and Tom",
           "One day, a big red ball", "Sam was sad because his toy", "The sun",
           "Mom said, \"Let's bake a cake!\""]


def unescape(line):
    """Undoes banyan's --prompts-file output escaping (\\\\ -> \\, \\n -> newline)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            out.append({"n": "\n", "\\": "\\"}.get(line[i + 1], line[i:i + 2]))
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--banyan", required=True, help="the banyan CLI binary")
    p.add_argument("--model", default=os.path.join(MODEL_DIR, "stories260K.bin"))
    p.add_argument("--tokenizer", default=os.path.join(MODEL_DIR, "tok512.bin"))
    p.add_argument("--spm", default=os.path.join(MODEL_DIR, "tok512.model"))
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt", action="append", help="replaces the built-in prompts")
    args = p.parse_args()
    prompts = args.prompt or PROMPTS

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(prompts) + "\n")
        prompts_file = f.name
    try:
        run = subprocess.run([args.banyan, "generate", "--model", args.model, "--tokenizer",
                              args.spm, "--prompts-file", prompts_file, "--temperature", "0",
                              "--max-tokens", str(args.max_tokens)],
                             capture_output=True, text=True, check=True)
    finally:
        os.unlink(prompts_file)
    banyan_out = [unescape(line) for line in run.stdout.split("\n")[:len(prompts)]]

    tok = Tokenizer(args.tokenizer)
    ids = [tok.encode(s) for s in prompts]
    try:
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(model_file=args.spm)
        spm_ok = sum(i == [1] + sp.encode(s) for i, s in zip(ids, prompts))
        print(f"prompt ids equal to sentencepiece's: {spm_ok}/{len(prompts)}")
    except ImportError:
        print("python sentencepiece module absent: prompt ids not compared with it")

    base = Llama2c(args.model).eval()
    total = max(len(i) for i in ids) + args.max_tokens
    tokens, _ = generate(base, ids, total, torch.zeros(len(ids)))
    same = 0
    for r, (prompt, want) in enumerate(zip(prompts, banyan_out)):
        new = tokens[r, len(ids[r]):len(ids[r]) + args.max_tokens].tolist()
        if EOS_ID in new:
            new = new[:new.index(EOS_ID)]
        got = tok.decode(new)
        ok = got == want
        same += ok
        print(f"{'same' if ok else 'DIFFERENT'}: {prompt!r} ({len(ids[r])} prompt ids, "
              f"{len(new)} new tokens)")
        if not ok:
            print(f"  python: {got!r}\n  banyan: {want!r}")
    print(f"{same}/{len(prompts)} greedy continuations equal to banyan's")
    return 0 if same == len(prompts) else 1


if __name__ == "__main__":
    sys.exit(main())
