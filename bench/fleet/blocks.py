"""Block-hash chains of token sequences, as banyand reports them in its KV-cache events.

docs/kv_events.md, "Hashes": block k of a sequence is its tokens [k*c, (k+1)*c) from position 0;
the first block's hash is seeded by the cache namespace (tenant, user, cache_salt), each later
one by the hash of the block before it. Only full blocks have hashes.
"""

M64 = (1 << 64) - 1
G = 0x9E3779B97F4A7C15


def mix64(x):
    """splitmix64's finalizer."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def namespace(tenant, user="", cache_salt=""):
    """The cache namespace of a request (server/common/validation.cc, CacheNamespace)."""
    parts = (("t", tenant), ("u", user), ("s", cache_salt))
    return "|".join(f"{k}{len(v.encode())}:{v}" for k, v in parts)


def namespace_seed(ns):
    data = ns.encode()
    h = 0xCBF29CE484222325  # FNV-1a 64
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & M64
    return mix64(h ^ ((len(data) * G) & M64))


def block_hash(parent, tokens):
    h = mix64(parent ^ ((len(tokens) * G) & M64))
    for t in tokens:
        h = mix64((h + G + (t & 0xFFFFFFFF)) & M64)
    return h


def chain(ns, tokens, block_size):
    """Hashes of the full blocks of tokens, first block first."""
    hashes = []
    parent = namespace_seed(ns)
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = block_hash(parent, tokens[start:start + block_size])
        hashes.append(parent)
    return hashes
