#!/usr/bin/env python3
"""Tests of the Hydra tools: python3 tools/hydra/test_hydra.py (needs python3-torch; a few
seconds on the CPU). Not part of ctest: the CI machine does not install PyTorch."""
import json
import os
import struct
import sys
import tempfile
import unittest

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eval_acceptance import accepted_lengths, draft_tree, walk  # noqa: E402
from heads import DraftHeads, load_heads, load_safetensors, save_safetensors  # noqa: E402
from llama2c import Llama2c, Tokenizer  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL_DIR = os.path.join(REPO, "models", "stories260K")


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_and_layout(self):
        g = torch.Generator().manual_seed(0)
        tensors = {"b": torch.randn(3, 5, generator=g), "a": torch.randn(7, generator=g),
                   "c.weight": torch.randn(2, 2, 2, generator=g)}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.safetensors")
            save_safetensors(path, tensors, {"kind": "hydra"})
            back, meta = load_safetensors(path)
            with open(path, "rb") as f:
                data = f.read()
        self.assertEqual(meta, {"kind": "hydra"})
        for k, v in tensors.items():
            self.assertTrue(torch.equal(back[k], v), k)
        (n,) = struct.unpack("<Q", data[:8])
        self.assertEqual((8 + n) % 8, 0)  # data 8-byte aligned
        header = json.loads(data[8:8 + n])
        header.pop("__metadata__")
        spans = sorted(v["data_offsets"] for v in header.values())
        self.assertEqual(spans[0][0], 0)
        for (_, end), (begin, _) in zip(spans, spans[1:]):
            self.assertEqual(end, begin)  # no gaps
        self.assertEqual(spans[-1][1], len(data) - 8 - n)


class BaseModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = Llama2c(os.path.join(MODEL_DIR, "stories260K.bin")).eval()
        cls.tok = Tokenizer(os.path.join(MODEL_DIR, "tok512.bin"))

    def test_tokenizer_matches_sentencepiece_ids(self):
        # ids of tok512.model (sentencepiece 0.1.97), with BOS
        self.assertEqual(self.tok.encode("Once upon a time"), [1, 403, 407, 261, 378])
        self.assertEqual(self.tok.encode("Lily and Tom   "), [1, 317, 269, 274, 287])
        self.assertEqual(self.tok.encode(" x"), [1, 410, 444])

    @torch.no_grad()
    def test_cached_decode_equals_full_forward(self):
        ids = torch.tensor([self.tok.encode("The little dog ran to the park.")])
        full_h, full_logits = self.base(ids)
        cache = self.base.new_cache(1, ids.shape[1])
        h0, _ = self.base(ids[:, :5], 0, cache)
        h1, _ = self.base(ids[:, 5:], 5, cache)
        torch.testing.assert_close(torch.cat((h0, h1), 1), full_h, rtol=1e-4, atol=1e-5)
        self.assertTrue(torch.equal(full_logits, full_h @ self.base.tok_embeddings.T))

    @torch.no_grad()
    def test_greedy_text(self):
        # `banyan generate --prompt "Once upon a time" --temperature 0 --max-tokens 27`
        ids = self.tok.encode("Once upon a time")
        out = []
        for _ in range(27):
            _, logits = self.base(torch.tensor([ids + out]))
            out.append(int(logits[0, -1].argmax()))
        self.assertEqual(self.tok.decode(out),
                         ", there was a little girl named Lily. She loved to play outside in "
                         "the park.")

    @torch.no_grad()
    def test_untrained_head_is_base_lm_head(self):
        for kind in ("hydra", "medusa"):
            heads = DraftHeads(kind, 2, 16, self.base.config.dim)
            h = torch.randn(3, self.base.config.dim)
            prefix = torch.randn(3, 2, self.base.config.dim)
            self.assertTrue(torch.equal(heads.head_state(1, h, prefix), h))

    @torch.no_grad()
    def test_shipped_heads_and_reference_values(self):
        ids = self.tok.encode("Once upon a time")
        hidden, logits = self.base(torch.tensor([ids]))
        h, root = hidden[:, -1], logits[:, -1].argmax(-1)
        self.assertEqual(root.item(), 432)
        want = {"hydra": ([383, 286, 261, 376], [383, 322, 358, 353]),
                "medusa": ([383, 286, 261, 376], [383, 261, 312, 322])}
        for name in ("config.json", "medusa_config.json"):
            heads, cfg = load_heads(os.path.join(MODEL_DIR, "hydra", name))
            base_cfg = self.base.config.to_json()
            for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
                      "tie_embeddings"):
                self.assertEqual(cfg["base_model"][k], base_cfg[k], k)
            for head in cfg["heads"]:
                self.assertEqual(head["input_size"], heads.input_size(head["index"]))
            chain = [t[0, 0].item() for t, _ in draft_tree(heads, self.base, h, root, [1] * 4)]
            top4 = draft_tree(heads, self.base, h, root, [4])[0][0][0].tolist()
            self.assertEqual((chain, top4), want[cfg["kind"]], cfg["kind"])


class AcceptanceTest(unittest.TestCase):
    def test_accepted_lengths_follow_one_path(self):
        # tree [2, 2]: depth 1 = {5, 6}; depth 2 = {7, 8} under 5 and {9, 10} under 6
        levels = [(torch.tensor([[5, 6]] * 3), torch.tensor([0, 0])),
                  (torch.tensor([[7, 8, 9, 10]] * 3), torch.tensor([0, 0, 1, 1]))]
        target = torch.tensor([[6, 9], [6, 7], [4, 7]])
        self.assertEqual(accepted_lengths(levels, target).tolist(), [2, 1, 0])

    def test_walk_skips_accepted_tokens(self):
        acc_at = torch.tensor([[2, 9, 9, 0, 1, 9, 0, 0]])
        # t=0 accepts 2 -> t=3 accepts 0 -> t=4 accepts 1 -> t=6 (end 0 + 7 not reached)
        self.assertEqual(walk(acc_at, torch.tensor([0]), 7).tolist(), [2, 0, 1, 0])


if __name__ == "__main__":
    unittest.main()
