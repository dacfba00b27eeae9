"""Self-distillation data: sequences the base model writes itself, from short varied prompts.

A prompt is BOS alone, BOS + one of the story openers below, or BOS + 1-3 random word pieces
(ids past the byte pieces). Each row is then continued by sampling at a temperature drawn per
row, and optionally switched to greedy after a number of sampled tokens (the evaluation's
held-out sequences: a sampled prefix for variety, then the greedy continuation that speculative
decoding must reproduce).
"""
import torch

from llama2c import BOS_ID

# Short openers in the style of the base model's stories (written for this tool).
OPENERS = [
    "Once upon a time", "One day", "Lily and Tom", "The little dog", "There was a big",
    "Tim wanted to", "Sara had a", "In the park", "The sun was", "Mom said",
    "Ben and his friend", "A small bird", "The cat", "Once there was a girl named",
    "It was a sunny day", "The boy saw", "She liked to", "They went to the", "The old man",
    "Anna found a", "Max was sad because", "At night", "The toy car", "Grandma baked",
    "The big red ball", "Sam and Mia", "The fish", "He looked at the", "The tree was",
    "After school",
]
FIRST_WORD_PIECE = 259  # 0..2 specials, 3..258 byte pieces (tok512)


def make_prompts(tokenizer, n, generator, vocab_size):
    """n prompts (lists of ids, each starting with BOS), reproducible from `generator` (CPU)."""
    encoded = [tokenizer.encode(s) for s in OPENERS]
    prompts = []
    for _ in range(n):
        kind = int(torch.randint(3, (1,), generator=generator))
        if kind == 0:
            prompts.append([BOS_ID])
        elif kind == 1:
            prompts.append(encoded[int(torch.randint(len(encoded), (1,), generator=generator))])
        else:
            k = int(torch.randint(1, 4, (1,), generator=generator))
            ids = torch.randint(FIRST_WORD_PIECE, vocab_size, (k,), generator=generator)
            prompts.append([BOS_ID] + ids.tolist())
    return prompts


@torch.no_grad()
def generate(model, prompts, total_len, temperatures, greedy_from=None, seed=0, batch=256,
             device="cpu", want_hidden=False):
    """Continues every prompt to total_len tokens.

    temperatures: [N] floats (0 = greedy); greedy_from: [N] ints or None, the position from
    which row r decodes greedily whatever its temperature. Sampling uses one torch.Generator
    on `device` seeded with `seed`, so a run is reproducible on one machine and device kind.
    Returns tokens [N, total_len] (int64, CPU), prompt_len [N] and, with want_hidden,
    hidden [N, total_len, dim] (float32, CPU): the base model's final-norm hidden state at
    every position, taken from the same decode steps.
    """
    n = len(prompts)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    tokens = torch.zeros(n, total_len, dtype=torch.long)
    prompt_len = torch.tensor([len(p) for p in prompts])
    hidden = torch.zeros(n, total_len, model.config.dim) if want_hidden else None
    if greedy_from is None:
        greedy_from = torch.full((n,), total_len)
    for b0 in range(0, n, batch):
        rows = slice(b0, min(n, b0 + batch))
        B = rows.stop - rows.start
        forced = torch.zeros(B, total_len, dtype=torch.long)
        for r, p in enumerate(prompts[rows]):
            forced[r, :len(p)] = torch.tensor(p)
        forced = forced.to(device)
        plen = prompt_len[rows].to(device)
        temp = torch.as_tensor(temperatures[rows], dtype=torch.float32).to(device)
        gfrom = torch.as_tensor(greedy_from[rows]).to(device)
        out = torch.zeros(B, total_len, dtype=torch.long, device=device)
        out[:, 0] = forced[:, 0]
        cache = model.new_cache(B, total_len, device)
        hid = torch.zeros(B, total_len, model.config.dim, device=device) if want_hidden else None
        for pos in range(total_len):
            h, logits = model(out[:, pos:pos + 1], pos, cache)
            if want_hidden:
                hid[:, pos] = h[:, 0]
            if pos == total_len - 1:
                break
            logits = logits[:, 0]
            greedy = logits.argmax(-1)
            scaled = logits / temp.clamp(min=1e-6)[:, None]
            sampled = torch.multinomial(scaled.softmax(-1), 1, generator=gen)[:, 0]
            use_greedy = (temp <= 0) | (pos + 1 >= gfrom)
            nxt = torch.where(use_greedy, greedy, sampled)
            out[:, pos + 1] = torch.where(pos + 1 < plen, forced[:, pos + 1], nxt)
        tokens[rows] = out.cpu()
        if want_hidden:
            hidden[rows] = hid.cpu()
    if want_hidden:
        return tokens, prompt_len, hidden
    return tokens, prompt_len
