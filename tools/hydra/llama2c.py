"""A PyTorch re-implementation of banyan's forward pass for llama2.c checkpoints, and the
llama2.c tokenizer file (tok512.bin) read as a SentencePiece BPE vocabulary.

Checkpoint layout (legacy version-0 export, little-endian; model/llama2c_loader.h):
  int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len
    (vocab_size < 0: an untied classifier `wcls` follows; |vocab_size| is the vocabulary)
  fp32 tok_embeddings [vocab, dim]
  fp32 rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim], wv [L, kv_dim, dim],
       wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden],
       w3 [L, hidden, dim], rms_final [dim]
  fp32 freq_cis_real [max_seq_len, head_dim / 2], freq_cis_imag (same)  -- ignored
  fp32 wcls [vocab, dim]   (only when vocab_size < 0)
The model: pre-norm LLaMA, RMSNorm eps 1e-5, GQA, RoPE theta 10000 rotating interleaved pairs
(2i, 2i + 1) of each head, SwiGLU FFN w2(silu(w1 x) * w3 x). BOS is 1, EOS is 2.

Works with torch 1.13 (Debian 12) and newer: no scaled_dot_product_attention, no compile.
"""
import hashlib
import math
import struct

import torch
import torch.nn.functional as F

BOS_ID = 1
EOS_ID = 2
NORM_EPS = 1e-5
ROPE_THETA = 10000.0


class Config:
    """The base model's shape, as in the checkpoint header."""

    FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
              "max_seq_len")

    def __init__(self, header):
        (self.dim, self.hidden_dim, self.n_layers, self.n_heads, self.n_kv_heads, vocab,
         self.max_seq_len) = header
        self.tie_embeddings = vocab > 0
        self.vocab_size = abs(vocab)
        self.head_dim = self.dim // self.n_heads
        self.kv_dim = self.n_kv_heads * self.head_dim

    def to_json(self):
        d = {k: getattr(self, k) for k in self.FIELDS}
        d.update(tie_embeddings=self.tie_embeddings, head_dim=self.head_dim,
                 norm_eps=NORM_EPS, rope_theta=ROPE_THETA, rope_style="interleaved",
                 bos_id=BOS_ID, eos_id=EOS_ID)
        return d


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Llama2c(torch.nn.Module):
    """The frozen base model. All weights are buffers (never trained).

    forward(tokens [B, T], start_pos, cache) -> (hidden [B, T, dim], logits [B, T, vocab]);
    `hidden` is the final-RMSNorm output, the vector the LM head multiplies.
    """

    def __init__(self, path):
        super().__init__()
        with open(path, "rb") as f:
            data = f.read()
        header = struct.unpack("<7i", data[:28])
        c = self.config = Config(header)
        floats = torch.frombuffer(bytearray(data[28:]), dtype=torch.float32)
        L, D, H, KV, V = c.n_layers, c.dim, c.hidden_dim, c.kv_dim, c.vocab_size
        pos = 0

        def take(*shape):
            nonlocal pos
            n = math.prod(shape)
            t = floats[pos:pos + n].reshape(shape).clone()
            pos += n
            return t

        self.register_buffer("tok_embeddings", take(V, D))
        for name, shape in (("rms_att", (L, D)), ("wq", (L, D, D)), ("wk", (L, KV, D)),
                            ("wv", (L, KV, D)), ("wo", (L, D, D)), ("rms_ffn", (L, D)),
                            ("w1", (L, H, D)), ("w2", (L, D, H)), ("w3", (L, H, D))):
            self.register_buffer(name, take(*shape))
        self.register_buffer("rms_final", take(D))
        pos += c.max_seq_len * c.head_dim  # freq_cis_real + freq_cis_imag
        if c.tie_embeddings:
            self.register_buffer("lm_head", self.tok_embeddings)
        else:
            self.register_buffer("lm_head", take(V, D))
        if pos != floats.numel():
            raise ValueError(f"{path}: size mismatch: {floats.numel()} floats after the header, "
                             f"the header implies {pos}")
        # RoPE tables [max_seq_len, head_dim / 2], computed in float64 then rounded.
        inv_freq = ROPE_THETA ** (-torch.arange(0, c.head_dim, 2, dtype=torch.float64)
                                  / c.head_dim)
        angles = torch.arange(c.max_seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
        self.register_buffer("rope_cos", angles.cos().float())
        self.register_buffer("rope_sin", angles.sin().float())

    @staticmethod
    def rms_norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * w

    def rope(self, x, start_pos):
        """x: [B, heads, T, head_dim]; rotates pairs (2i, 2i + 1) by pos * theta^(-2i/hd)."""
        T = x.shape[2]
        cos = self.rope_cos[start_pos:start_pos + T]
        sin = self.rope_sin[start_pos:start_pos + T]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    def new_cache(self, batch, max_len, device=None):
        """KV cache: (k, v), each [n_layers, B, n_kv_heads, max_len, head_dim]."""
        c = self.config
        shape = (c.n_layers, batch, c.n_kv_heads, max_len, c.head_dim)
        device = device or self.tok_embeddings.device
        return (torch.zeros(shape, device=device), torch.zeros(shape, device=device))

    def forward(self, tokens, start_pos=0, cache=None):
        c = self.config
        B, T = tokens.shape
        x = F.embedding(tokens, self.tok_embeddings)
        S = start_pos + T  # keys visible to the last query
        group = c.n_heads // c.n_kv_heads
        mask = None  # True where a query must not see a key; none for one new token
        if T > 1:
            causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(start_pos)
            mask = ~causal.repeat(group, 1)
        for l in range(c.n_layers):
            h = self.rms_norm(x, self.rms_att[l])
            q = (h @ self.wq[l].T).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
            k = (h @ self.wk[l].T).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
            v = (h @ self.wv[l].T).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
            q, k = self.rope(q, start_pos), self.rope(k, start_pos)
            if cache is not None:
                cache[0][l, :, :, start_pos:S] = k
                cache[1][l, :, :, start_pos:S] = v
                k, v = cache[0][l, :, :, :S], cache[1][l, :, :, :S]
            elif start_pos != 0:
                raise ValueError("start_pos > 0 needs a cache")
            # GQA: query head h reads kv head h // group. The group's queries are stacked as
            # rows [B, n_kv_heads, group * T, head_dim] so that K and V are not copied.
            q = q.reshape(B, c.n_kv_heads, group * T, c.head_dim)
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(c.head_dim))
            if mask is not None:
                scores = scores.masked_fill(mask, float("-inf"))
            att = scores.softmax(-1) @ v  # [B, n_kv_heads, group * T, head_dim]
            att = att.view(B, c.n_heads, T, c.head_dim).transpose(1, 2).reshape(B, T, c.dim)
            x = x + att @ self.wo[l].T
            h = self.rms_norm(x, self.rms_ffn[l])
            x = x + (F.silu(h @ self.w1[l].T) * (h @ self.w3[l].T)) @ self.w2[l].T
        hidden = self.rms_norm(x, self.rms_final)
        return hidden, hidden @ self.lm_head.T


class Tokenizer:
    """SentencePiece BPE over the pieces and scores of a llama2.c tokenizer file.

    File: int32 max_token_length, then per id: float32 score, int32 length, bytes. Encoding
    normalizes like the bundled tok512.model (add_dummy_prefix, spaces as U+2581, runs of
    spaces collapsed), starts from characters (unknown ones as <0xXX> byte pieces) and merges
    the adjacent pair with the highest-scoring merged piece, leftmost first, until none is in
    the vocabulary. Decoding drops control pieces and the first piece's leading space.
    """

    SPACE = "\u2581"

    def __init__(self, path):
        with open(path, "rb") as f:
            data = f.read()
        pos = 4
        self.pieces, self.scores = [], []
        while pos < len(data):
            score, n = struct.unpack("<fi", data[pos:pos + 8])
            pos += 8
            # llama2.c's export writes U+2581 as a plain space; put it back.
            self.pieces.append(data[pos:pos + n].decode("utf-8").replace(" ", self.SPACE))
            self.scores.append(score)
            pos += n
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.byte_ids = {}
        for i, p in enumerate(self.pieces):
            if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
                self.byte_ids[int(p[3:5], 16)] = i
        self.control = {i for i, p in enumerate(self.pieces) if p.strip() in ("<s>", "</s>")}

    def encode(self, text, bos=True):
        text = " ".join(text.split())
        normalized = self.SPACE + text.replace(" ", self.SPACE) if text else ""
        symbols = []
        for ch in normalized:
            if ch in self.ids:
                symbols.append(ch)
            else:
                symbols.extend(self.pieces[self.byte_ids[b]] for b in ch.encode("utf-8"))
        while True:
            best, best_score = -1, -math.inf
            for i in range(len(symbols) - 1):
                merged = symbols[i] + symbols[i + 1]
                j = self.ids.get(merged)
                if j is not None and self.scores[j] > best_score:
                    best, best_score = i, self.scores[j]
            if best < 0:
                break
            symbols[best:best + 2] = [symbols[best] + symbols[best + 1]]
        return ([BOS_ID] if bos else []) + [self.ids[s] for s in symbols]

    def decode(self, ids):
        out = bytearray()
        first = True
        for i in ids:
            if i in self.control:
                continue
            p = self.pieces[i]
            if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
                out.append(int(p[3:5], 16))
            else:
                if first and p.startswith(self.SPACE):
                    p = p[1:]
                out += p.replace(self.SPACE, " ").encode("utf-8")
            first = False
        return out.decode("utf-8", errors="replace")


def pick_device(name="auto"):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
