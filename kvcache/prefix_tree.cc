#include "kvcache/prefix_tree.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace banyan::kvcache {
namespace {

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

SlotRef PrefixTree::Node::SlotOf(int32_t i, int32_t chunk_size) const {
  int32_t g = first_slot + i;
  return SlotRef{chunks[g / chunk_size], g % chunk_size};
}

std::pair<int32_t, int32_t> PrefixTree::Node::SlotRange(size_t k, int32_t chunk_size) const {
  int32_t begin = (k == 0) ? first_slot : 0;
  int32_t end_global = first_slot + size();
  int32_t end = std::min<int32_t>(chunk_size, end_global - static_cast<int32_t>(k) * chunk_size);
  return {begin, end};
}

// Where a walk from `start` along a token list stopped.
struct PrefixTree::Cursor {
  Node* node = nullptr;  // deepest node whose tokens all matched (or start)
  Node* mid = nullptr;   // child of `node` matched only partly (nullptr: none)
  int32_t mid_len = 0;   // tokens of `mid` that matched, 0 < mid_len < mid->size()
  int32_t matched = 0;   // tokens of the list matched below start
};

PrefixTree::PrefixTree(ChunkPool* pool) : pool_(pool), chunk_size_(pool->chunk_size()) {}

PrefixTree::~PrefixTree() {
  log_ = nullptr;  // the log may be gone already; nothing is reported while the tree goes
  for (auto& [ns, root] : roots_) FreeNode(root.get());
  EndPacking();
}

void PrefixTree::FreeNode(Node* node) {
  for (auto& [tok, child] : node->children) FreeNode(child.get());
  ForgetBlocks(node);
  for (ChunkId c : node->chunks) pool_->Free(c);
  node->chunks.clear();
}

void PrefixTree::set_event_log(KvEventLog* log) {
  if (log != nullptr) {
    for (auto& [ns, root] : roots_) {
      BANYAN_CHECK(root->children.empty()) << "[kv] event log attached to a tree holding tokens";
    }
  }
  log_ = log;
}

void PrefixTree::ForgetBlocks(Node* node) {
  if (log_ != nullptr) {
    for (auto it = node->block_hashes.rbegin(); it != node->block_hashes.rend(); ++it) {
      log_->Removed(*it);
    }
  }
  node->block_hashes.clear();
}

void PrefixTree::SyncBlocks(Node* node) {
  if (log_ == nullptr || node->parent == nullptr) return;
  const int32_t c = chunk_size_;
  const int32_t d = node->depth_tokens;
  const int32_t end = d + node->size();
  // Blocks ending in this node; one ending at a pending token is not full yet.
  size_t want = static_cast<size_t>(end / c - d / c);
  if (want > 0 && end % c == 0 && node->tokens.back() == kPendingToken) --want;
  while (node->block_hashes.size() > want) {
    log_->Removed(node->block_hashes.back());
    node->block_hashes.pop_back();
  }
  if (node->block_hashes.size() == want) return;
  const Node* root = node;
  while (root->parent != nullptr) root = root->parent;
  std::vector<int32_t> block(static_cast<size_t>(c));
  while (node->block_hashes.size() < want) {
    const int32_t e = (d / c + static_cast<int32_t>(node->block_hashes.size()) + 1) * c;
    const int32_t b = e - c;  // the block's tokens: [b, e), possibly across ancestors
    for (const Node* m = node; m->parent != nullptr; m = m->parent) {
      const int32_t lo = std::max(b, m->depth_tokens);
      const int32_t hi = std::min(e, m->depth_tokens + m->size());
      for (int32_t p = lo; p < hi; ++p) block[p - b] = m->tokens[p - m->depth_tokens];
      if (m->depth_tokens <= b) break;
    }
    std::optional<uint64_t> parent;
    uint64_t chain = root->ns_seed;
    if (b > 0) {
      // The block before ends at b, in the node m with depth < b <= depth + size: complete there
      // (only this node's last block can wait for a pending token).
      const Node* m = node;
      while (m->depth_tokens >= b) m = m->parent;
      const size_t idx = static_cast<size_t>(b / c - m->depth_tokens / c - 1);
      BANYAN_CHECK(idx < m->block_hashes.size()) << "[kv] parent block missing at " << b;
      chain = m->block_hashes[idx];
      parent = chain;
    }
    const uint64_t h = BlockHash(chain, block);
    node->block_hashes.push_back(h);
    log_->Stored(h, parent, block, root->ns);
  }
}

std::vector<FullBlock> PrefixTree::FullBlocks() const {
  std::vector<FullBlock> out;
  struct Item {
    const Node* node;
    uint64_t chain;                // hash of the last full block above (the seed at first)
    bool has_parent;               // a full block lies above
    std::vector<int32_t> partial;  // tokens since the last block boundary
  };
  std::vector<Item> stack;
  for (auto& [ns, root] : roots_) {
    const uint64_t seed = NamespaceSeed(ns);
    for (auto& [t, child] : root->children) stack.push_back(Item{child.get(), seed, false, {}});
    while (!stack.empty()) {
      Item it = std::move(stack.back());
      stack.pop_back();
      bool pending = false;
      for (int32_t t : it.node->tokens) {
        if (t == kPendingToken) {
          pending = true;
          break;
        }
        it.partial.push_back(t);
        if (static_cast<int32_t>(it.partial.size()) == chunk_size_) {
          FullBlock& b = out.emplace_back();
          b.hash = BlockHash(it.chain, it.partial);
          if (it.has_parent) b.parent = it.chain;
          b.tokens = it.partial;
          b.ns = ns;
          it.chain = b.hash;
          it.has_parent = true;
          it.partial.clear();
        }
      }
      if (pending) continue;
      for (auto& [t, child] : it.node->children) {
        stack.push_back(Item{child.get(), it.chain, it.has_parent, it.partial});
      }
    }
  }
  return out;
}

PrefixTree::Node* PrefixTree::Root(std::string_view ns) {
  auto it = roots_.find(ns);
  if (it == roots_.end()) {
    it = roots_.emplace(std::string(ns), std::make_unique<Node>()).first;
    it->second->ns = std::string(ns);
    it->second->ns_seed = NamespaceSeed(ns);
  }
  return it->second.get();
}

const PrefixTree::Node* PrefixTree::FindRoot(std::string_view ns) const {
  auto it = roots_.find(ns);
  return it == roots_.end() ? nullptr : it->second.get();
}

PrefixTree::Cursor PrefixTree::Walk(Node* start, std::span<const int32_t> tokens,
                                    bool decode) const {
  Cursor cur;
  cur.node = start;
  size_t pos = 0;
  while (pos < tokens.size()) {
    // The child with the longest match among those starting with tokens[pos].
    Node* child = nullptr;
    int32_t l = 0;
    auto [lo, hi] = cur.node->children.equal_range(tokens[pos]);
    for (auto it = lo; it != hi; ++it) {
      Node* c = it->second.get();
      if (decode && c->size() != 1) continue;
      int32_t m = 0;
      while (m < c->size() && pos + m < tokens.size() && c->tokens[m] == tokens[pos + m]) ++m;
      if (child == nullptr || m > l) {
        child = c;
        l = m;
      }
    }
    if (child == nullptr) break;
    pos += l;
    if (l < child->size()) {
      cur.mid = child;
      cur.mid_len = l;
      break;
    }
    cur.node = child;
  }
  cur.matched = static_cast<int32_t>(pos);
  return cur;
}

int32_t PrefixTree::Match(std::string_view ns, std::span<const int32_t> tokens,
                          int32_t* cached_chunks) const {
  if (cached_chunks != nullptr) *cached_chunks = 0;
  const Node* root = FindRoot(ns);
  if (root == nullptr) return 0;
  Cursor cur = Walk(const_cast<Node*>(root), tokens);
  if (cached_chunks != nullptr) {
    if (cur.mid != nullptr && cur.mid->refcount == 0) {
      *cached_chunks += static_cast<int32_t>(cur.mid->chunks.size());
    }
    for (const Node* n = cur.node; n->parent != nullptr; n = n->parent) {
      if (n->refcount == 0) *cached_chunks += static_cast<int32_t>(n->chunks.size());
    }
  }
  return cur.matched;
}

namespace {

// A node grows in place when it is not a root, has no children, and the only live sequence on
// it (if any) is the one being extended.
bool CanGrowInPlace(const PrefixTree::Node* node, const PrefixTree::Node* own_leaf) {
  return node->parent != nullptr && node->children.empty() && !node->packed &&
         node->refcount == (node == own_leaf ? 1 : 0);
}

}  // namespace

int32_t PrefixTree::ChunksNeeded(const Cursor& cur, Node* own_leaf, int32_t remaining) const {
  int32_t needed = 0;
  if (cur.mid != nullptr) {
    if ((cur.mid->first_slot + cur.mid_len) % chunk_size_ != 0) needed += 1;
    return needed + CeilDiv(remaining, chunk_size_);
  }
  if (remaining == 0) return 0;
  const Node* end = cur.node;
  if (CanGrowInPlace(end, own_leaf)) {
    int32_t spare = static_cast<int32_t>(end->chunks.size()) * chunk_size_ -
                    (end->first_slot + end->size());
    return CeilDiv(std::max(0, remaining - spare), chunk_size_);
  }
  return CeilDiv(remaining, chunk_size_);
}

absl::Status PrefixTree::Reserve(int32_t needed) const {
  if (pool_->chunks_free() >= needed) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("[kv] not enough KV cache: need ", needed, " chunks, ", pool_->chunks_free(),
                   " free of ", pool_->chunks_total(), " (chunk size ", chunk_size_, " tokens)"));
}

PrefixTree::Node* PrefixTree::Split(Node* node, int32_t at, std::vector<ChunkCopy>* copies) {
  BANYAN_CHECK(at > 0 && at < node->size()) << "split at " << at << " of " << node->size();
  Node* parent = node->parent;
  auto upper_owned = std::make_unique<Node>();
  Node* upper = upper_owned.get();
  upper->parent = parent;
  upper->tokens.assign(node->tokens.begin(), node->tokens.begin() + at);
  upper->refcount = node->refcount;
  upper->depth_tokens = node->depth_tokens;
  upper->last_use = node->last_use;
  upper->first_slot = node->first_slot;

  const int32_t c = chunk_size_;
  const int32_t s = node->first_slot + at;
  const size_t b = s / c;
  const int32_t off = s % c;
  std::vector<ChunkId> lower_chunks;
  if (node->packed) {
    // Both parts stay in the node's one shared chunk (b == 0): no copy, one more holder.
    upper->packed = true;
    upper->chunks = node->chunks;
    for (ChunkId ch : upper->chunks) pool_->Retain(ch);
    lower_chunks = node->chunks;
  } else if (off == 0) {
    upper->chunks.assign(node->chunks.begin(), node->chunks.begin() + b);
    lower_chunks.assign(node->chunks.begin() + b, node->chunks.end());
  } else {
    // Chunk b holds the end of the upper part and the start of the lower part. Copy the
    // smaller part (< c tokens) to a fresh chunk at the same slots.
    ChunkId straddled = node->chunks[b];
    int32_t up_begin = (b == 0) ? node->first_slot : 0;
    int32_t low_end = std::min<int32_t>(c, node->first_slot + node->size() - b * c);
    auto fresh = pool_->Allocate();
    BANYAN_CHECK(fresh.ok()) << "split without a reserved chunk";
    if (off - up_begin <= low_end - off) {
      copies->push_back(ChunkCopy{straddled, *fresh, up_begin, off});
      upper->chunks.assign(node->chunks.begin(), node->chunks.begin() + b);
      upper->chunks.push_back(*fresh);
      lower_chunks.assign(node->chunks.begin() + b, node->chunks.end());
    } else {
      copies->push_back(ChunkCopy{straddled, *fresh, off, low_end});
      upper->chunks.assign(node->chunks.begin(), node->chunks.begin() + b + 1);
      lower_chunks.push_back(*fresh);
      lower_chunks.insert(lower_chunks.end(), node->chunks.begin() + b + 1, node->chunks.end());
    }
  }
  if (!node->block_hashes.empty()) {
    // Blocks ending in the upper part move up with it; no event (the tree holds the same tokens).
    const int32_t d = node->depth_tokens;
    const size_t up = std::min(node->block_hashes.size(), static_cast<size_t>((d + at) / c - d / c));
    upper->block_hashes.assign(node->block_hashes.begin(), node->block_hashes.begin() + up);
    node->block_hashes.erase(node->block_hashes.begin(), node->block_hashes.begin() + up);
  }
  node->chunks = std::move(lower_chunks);
  node->first_slot = off;
  node->tokens.erase(node->tokens.begin(), node->tokens.begin() + at);
  node->depth_tokens += at;

  auto [lo, hi] = parent->children.equal_range(upper->tokens[0]);
  auto slot_in_parent = std::find_if(lo, hi, [&](auto& kv) { return kv.second.get() == node; });
  BANYAN_CHECK(slot_in_parent != hi) << "split node not found under its parent";
  std::unique_ptr<Node> lower_owned = std::move(slot_in_parent->second);
  node->parent = upper;
  upper->children.emplace(node->tokens[0], std::move(lower_owned));
  slot_in_parent->second = std::move(upper_owned);
  ++shape_version_;
  return upper;
}

void PrefixTree::AppendTokens(Node* node, std::span<const int32_t> tokens,
                              std::vector<SlotRef>* slots) {
  for (int32_t t : tokens) {
    int32_t g = node->first_slot + node->size();
    if (static_cast<size_t>(g / chunk_size_) == node->chunks.size()) {
      auto id = pool_->Allocate();
      BANYAN_CHECK(id.ok()) << "append without a reserved chunk";
      node->chunks.push_back(*id);
      ++shape_version_;  // a chunk filled: the plan's chunk lists change
    }
    node->tokens.push_back(t);
    slots->push_back(SlotRef{node->chunks[g / chunk_size_], g % chunk_size_});
  }
  SyncBlocks(node);
}

absl::StatusOr<PlaceResult> PrefixTree::Place(Node* start, Node* own_leaf, SeqId seq,
                                              std::span<const int32_t> tokens,
                                              bool allow_evict, Node** end_out, bool packed) {
  const bool decode = own_leaf != nullptr && tokens.size() == 1;
  Cursor cur = Walk(start, tokens, decode);
  int32_t remaining = static_cast<int32_t>(tokens.size()) - cur.matched;
  // Packed: never in place, so a new child's chunks (an upper bound: it may fit the packing one).
  Node* grows = packed ? nullptr : own_leaf;
  int32_t needed = ChunksNeeded(cur, grows, remaining);
  if (pool_->chunks_free() < needed && allow_evict) {
    // Pin the walk's nodes so that eviction cannot free them, then evict. Eviction can remove
    // cached children of cur.node and so change how many chunks are needed: recompute.
    std::vector<Node*> pinned;
    for (Node* n = cur.node; n != nullptr; n = n->parent) pinned.push_back(n);
    if (cur.mid != nullptr) pinned.push_back(cur.mid);
    for (Node* n : pinned) ++n->refcount;
    Evict(needed - pool_->chunks_free());
    for (Node* n : pinned) --n->refcount;
    needed = ChunksNeeded(cur, grows, remaining);
  }
  if (absl::Status s = Reserve(needed); !s.ok()) return s;

  PlaceResult result;
  result.seq = seq;
  result.matched_tokens = cur.matched;
  Node* end = cur.node;
  if (cur.mid != nullptr) end = Split(cur.mid, cur.mid_len, &result.copies);
  if (remaining > 0) {
    auto rest = tokens.subspan(cur.matched);
    if (cur.mid == nullptr && !packed && CanGrowInPlace(end, own_leaf)) {
      AppendTokens(end, rest, &result.new_slots);
    } else {
      auto child = std::make_unique<Node>();
      child->parent = end;
      child->depth_tokens = end->depth_tokens + end->size();
      Node* raw = child.get();
      end->children.emplace(rest[0], std::move(child));
      if (packed && static_cast<int32_t>(rest.size()) <= chunk_size_) {
        Pack(raw, static_cast<int32_t>(rest.size()));
      }
      AppendTokens(raw, rest, &result.new_slots);
      end = raw;
      ++shape_version_;
    }
  }
  ++clock_;
  for (Node* n = end; n != start; n = n->parent) {
    ++n->refcount;
    n->last_use = clock_;
  }
  if (own_leaf != end) {
    if (own_leaf != nullptr) own_leaf->seqs_ending.erase(seq);
    end->seqs_ending.insert(seq);
    ++shape_version_;
  }
  *end_out = end;
  return result;
}

absl::StatusOr<PlaceResult> PrefixTree::Insert(std::string_view ns,
                                               std::span<const int32_t> tokens,
                                               bool allow_evict) {
  if (tokens.empty()) return absl::InvalidArgumentError("cannot insert an empty token list");
  Node* end = nullptr;
  auto result = Place(Root(ns), nullptr, next_seq_, tokens, allow_evict, &end);
  if (!result.ok()) return result.status();
  seqs_.emplace(next_seq_, Sequence{end, std::string(ns)});
  ++next_seq_;
  return result;
}

absl::StatusOr<PlaceResult> PrefixTree::Extend(SeqId seq, std::span<const int32_t> tokens,
                                               bool allow_evict) {
  return ExtendSequence(seq, tokens, allow_evict, /*packed=*/false);
}

absl::StatusOr<PlaceResult> PrefixTree::ExtendPacked(SeqId seq, std::span<const int32_t> tokens) {
  return ExtendSequence(seq, tokens, /*allow_evict=*/false, /*packed=*/true);
}

absl::StatusOr<PlaceResult> PrefixTree::ExtendSequence(SeqId seq, std::span<const int32_t> tokens,
                                                       bool allow_evict, bool packed) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no live sequence ", seq));
  PlaceResult empty;
  empty.seq = seq;
  if (tokens.empty()) return empty;
  Node* leaf = it->second.leaf;
  if (tokens.size() == 1) DropStaleContinuation(leaf, tokens[0]);
  Node* end = nullptr;
  auto result = Place(leaf, leaf, seq, tokens, allow_evict, &end, packed);
  if (!result.ok()) return result.status();
  it->second.leaf = end;
  return result;
}

void PrefixTree::Pack(Node* node, int32_t n) {
  if (pack_chunk_ == kNoChunk || pack_cursor_ + n > chunk_size_) {
    EndPacking();
    auto id = pool_->Allocate();  // Place reserved a chunk for the new node
    BANYAN_CHECK(id.ok()) << "packed placement without a reserved chunk";
    pack_chunk_ = *id;
    pack_cursor_ = 0;
  }
  node->packed = true;
  node->first_slot = pack_cursor_;
  node->chunks = {pack_chunk_};
  pool_->Retain(pack_chunk_);
  pack_cursor_ += n;
}

void PrefixTree::EndPacking() {
  if (pack_chunk_ == kNoChunk) return;
  pool_->Free(pack_chunk_);  // the tree's hold; freed here when no packed node holds it any more
  pack_chunk_ = kNoChunk;
  pack_cursor_ = 0;
}

void PrefixTree::DropStaleContinuation(Node* leaf, int32_t token) {
  // A decoding sequence does not split a longer child (see Walk's decode mode). A cached one
  // would only stay as a stale duplicate of what the sequence recomputes: drop it (no live
  // sequence uses any node of it), so that the leaf can grow in place.
  std::vector<Node*> stale;
  auto [lo, hi] = leaf->children.equal_range(token);
  for (auto it = lo; it != hi; ++it) {
    if (it->second->refcount == 0 && it->second->size() > 1) stale.push_back(it->second.get());
  }
  for (Node* c : stale) {
    FreeNode(c);
    Unlink(c);
  }
}

void PrefixTree::Unlink(Node* child) {
  auto [lo, hi] = child->parent->children.equal_range(child->tokens[0]);
  for (auto it = lo; it != hi; ++it) {
    if (it->second.get() == child) {
      child->parent->children.erase(it);
      return;
    }
  }
  BANYAN_CHECK(false) << "node not found under its parent";
}

absl::StatusOr<std::vector<PlaceResult>> PrefixTree::AppendBatch(
    std::span<const std::pair<SeqId, int32_t>> items, bool allow_evict) {
  std::map<Node*, std::vector<size_t>> groups;  // leaf -> indices into items (ordered: stable)
  std::unordered_set<SeqId> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    auto it = seqs_.find(items[i].first);
    if (it == seqs_.end()) {
      return absl::NotFoundError(absl::StrCat("no live sequence ", items[i].first));
    }
    if (!seen.insert(items[i].first).second) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", items[i].first, " twice"));
    }
    groups[it->second.leaf].push_back(i);
  }
  auto grows_together = [&](Node* node, const std::vector<size_t>& idx) {
    if (idx.size() < 2 || node->parent == nullptr || !node->children.empty() || node->packed ||
        node->refcount != static_cast<int32_t>(idx.size())) {
      return false;
    }
    for (size_t i : idx) {
      if (items[i].second != items[idx[0]].second) return false;
    }
    return true;
  };
  // Upper bound of the chunks needed, whatever order the appends run in: a shared growth needs
  // at most one; any other one-token append at most one (a new chunk in place or a new child;
  // decode appends never split). It needs none only when it grows in place into a spare slot of
  // a leaf that no other append of the batch can enter (one longer than a token).
  auto bound_of = [&]() {
    int32_t bound = 0;
    for (auto& [node, idx] : groups) {
      if (grows_together(node, idx)) {
        bound += (node->first_slot + node->size()) % chunk_size_ == 0 ? 1 : 0;
        continue;
      }
      for (size_t i : idx) {
        (void)i;
        const bool spare_in_place = idx.size() == 1 && node->refcount == 1 && !node->packed &&
                                    node->children.empty() && node->size() > 1 &&
                                    (node->first_slot + node->size()) % chunk_size_ != 0;
        bound += spare_in_place ? 0 : 1;
      }
    }
    return bound;
  };
  int32_t bound = bound_of();
  if (pool_->chunks_free() < bound && allow_evict) {
    Evict(bound - pool_->chunks_free());
    bound = bound_of();  // eviction may have removed children: recount
  }
  if (absl::Status s = Reserve(bound); !s.ok()) return s;

  std::vector<PlaceResult> results(items.size());
  for (auto& [node, idx] : groups) {
    if (grows_together(node, idx)) {
      std::vector<SlotRef> slots;
      AppendTokens(node, std::span<const int32_t>(&items[idx[0]].second, 1), &slots);
      ++shape_version_;  // a shared node grew: phase-1 segment spans change, not a row's tail
      for (size_t k = 0; k < idx.size(); ++k) {
        PlaceResult& r = results[idx[k]];
        r.seq = items[idx[k]].first;
        if (k == 0) {
          r.new_slots = slots;  // the first one writes the shared slot
        } else {
          r.matched_tokens = 1;
        }
      }
      continue;
    }
    for (size_t i : idx) {
      auto r = Extend(items[i].first, std::span<const int32_t>(&items[i].second, 1), false);
      BANYAN_CHECK(r.ok()) << "append failed within its reservation: " << r.status();
      results[i] = std::move(*r);
    }
  }
  return results;
}

bool PrefixTree::GrowsInPlace(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return false;
  const Node* leaf = it->second.leaf;
  return leaf->parent != nullptr && leaf->refcount == 1 && leaf->children.empty();
}

absl::StatusOr<std::vector<PlaceResult>> PrefixTree::AppendPending(std::span<const SeqId> seqs,
                                                                   bool allow_evict) {
  std::unordered_set<SeqId> seen;
  std::vector<Sequence*> found;  // live sequences are never evicted: valid throughout
  found.reserve(seqs.size());
  for (SeqId s : seqs) {
    auto it = seqs_.find(s);
    if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no live sequence ", s));
    if (!seen.insert(s).second) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " twice"));
    }
    const Node* leaf = it->second.leaf;
    if (leaf->parent == nullptr || leaf->tokens.back() == kPendingToken) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, " is empty or has a pending token already"));
    }
    found.push_back(&it->second);
  }
  // In place: a chunk when the leaf's last one is full. A pending fork: its own first chunk.
  auto needed = [&]() {
    int32_t n = 0;
    for (const Sequence* sq : found) {
      const Node* leaf = sq->leaf;
      n += !CanGrowInPlace(leaf, leaf) || (leaf->first_slot + leaf->size()) % chunk_size_ == 0;
    }
    return n;
  };
  int32_t need = needed();
  if (pool_->chunks_free() < need && allow_evict) {
    Evict(need - pool_->chunks_free());  // never a node a live sequence uses: no leaf here
    need = needed();  // eviction may have removed cached children: recount
  }
  if (absl::Status s = Reserve(need); !s.ok()) return s;

  std::vector<PlaceResult> results(seqs.size());
  const int32_t pending = kPendingToken;
  ++clock_;
  for (size_t i = 0; i < seqs.size(); ++i) {
    PlaceResult& r = results[i];
    r.seq = seqs[i];
    Sequence& sq = *found[i];
    Node* leaf = sq.leaf;
    if (CanGrowInPlace(leaf, leaf)) {
      AppendTokens(leaf, std::span<const int32_t>(&pending, 1), &r.new_slots);
      continue;
    }
    auto child = std::make_unique<Node>();
    child->parent = leaf;
    child->depth_tokens = leaf->depth_tokens + leaf->size();
    child->refcount = 1;
    child->last_use = clock_;
    Node* raw = child.get();
    leaf->children.emplace(kPendingToken, std::move(child));
    AppendTokens(raw, std::span<const int32_t>(&pending, 1), &r.new_slots);
    leaf->seqs_ending.erase(seqs[i]);
    raw->seqs_ending.insert(seqs[i]);
    sq.leaf = raw;
    ++shape_version_;
  }
  return results;
}

absl::Status PrefixTree::SetPendingToken(SeqId seq, int32_t token) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no live sequence ", seq));
  Node* leaf = it->second.leaf;
  if (leaf->tokens.empty() || leaf->tokens.back() != kPendingToken) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq, " has no pending token"));
  }
  if (token < 0) return absl::InvalidArgumentError(absl::StrCat("token ", token));
  leaf->tokens.back() = token;
  SyncBlocks(leaf);
  if (leaf->size() == 1) {
    // A pending fork (an append in place leaves at least two tokens): key it by its token.
    Node* parent = leaf->parent;
    auto [lo, hi] = parent->children.equal_range(kPendingToken);
    for (auto c = lo; c != hi; ++c) {
      if (c->second.get() != leaf) continue;
      auto handle = parent->children.extract(c);
      handle.key() = token;
      parent->children.insert(std::move(handle));
      break;
    }
    DropStaleContinuation(parent, token);
    ++shape_version_;
  }
  return absl::OkStatus();
}

int32_t PrefixTree::AppendChunksNeeded(SeqId seq, int32_t token) const {
  Node* leaf = seqs_.at(seq).leaf;
  Cursor cur = Walk(leaf, std::span<const int32_t>(&token, 1), /*decode=*/true);
  // Dropping a stale continuation first can only free chunks and let the leaf grow in place:
  // at most one chunk either way.
  return std::min(1, ChunksNeeded(cur, leaf, 1 - cur.matched));
}

int32_t PrefixTree::ChunksOnlyUsedBy(std::span<const SeqId> seqs) const {
  if (seqs.size() == 1) {
    // One sequence: its private nodes are the leaf's ancestors with one reference (references
    // only grow towards the root), so no counting map is needed.
    auto it = seqs_.find(seqs[0]);
    if (it == seqs_.end()) return 0;
    int32_t chunks = 0;
    for (const Node* p = it->second.leaf; p->parent != nullptr && p->refcount == 1;
         p = p->parent) {
      chunks += static_cast<int32_t>(p->chunks.size());
    }
    return chunks;
  }
  std::unordered_map<const Node*, int32_t> through;
  for (SeqId s : seqs) {
    auto it = seqs_.find(s);
    if (it == seqs_.end()) continue;
    for (const Node* p = it->second.leaf; p->parent != nullptr; p = p->parent) ++through[p];
  }
  int32_t chunks = 0;
  for (auto& [node, count] : through) {
    if (count == node->refcount) chunks += static_cast<int32_t>(node->chunks.size());
  }
  return chunks;
}

absl::StatusOr<std::vector<SeqId>> PrefixTree::Fork(SeqId seq, int n) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no live sequence ", seq));
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("fork count must be >= 1, got ", n));
  std::vector<SeqId> ids{seq};
  Node* leaf = it->second.leaf;
  std::string ns = it->second.ns;
  for (int i = 1; i < n; ++i) {
    SeqId id = next_seq_++;
    seqs_.emplace(id, Sequence{leaf, ns});
    leaf->seqs_ending.insert(id);
    for (Node* p = leaf; p->parent != nullptr; p = p->parent) ++p->refcount;
    ids.push_back(id);
  }
  if (n > 1) ++shape_version_;
  return ids;
}

absl::Status PrefixTree::Release(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no live sequence ", seq));
  Node* leaf = it->second.leaf;
  if (leaf->size() == 1 && leaf->tokens[0] == kPendingToken && leaf->refcount == 1 &&
      leaf->children.empty()) {
    // A pending fork never set (its step failed): the node goes with its chunk, and the
    // sequence is released from the node above.
    Node* parent = leaf->parent;
    leaf->seqs_ending.erase(seq);
    FreeNode(leaf);
    Unlink(leaf);
    parent->seqs_ending.insert(seq);
    it->second.leaf = leaf = parent;
    ++shape_version_;
  } else if (leaf->size() >= 2 && leaf->tokens.back() == kPendingToken && leaf->refcount == 1 &&
             leaf->children.empty()) {
    // A pending token never set (its step failed): the cache keeps only known tokens.
    if (absl::Status s = Truncate(seq, leaf->depth_tokens + leaf->size() - 1, nullptr); !s.ok()) {
      return s;
    }
  }
  leaf->seqs_ending.erase(seq);
  ++clock_;
  for (Node* p = leaf; p->parent != nullptr; p = p->parent) {
    BANYAN_CHECK(p->refcount > 0) << "refcount underflow releasing sequence " << seq;
    --p->refcount;
    p->last_use = clock_;
  }
  seqs_.erase(it);
  ++shape_version_;
  return absl::OkStatus();
}

absl::Status PrefixTree::Truncate(SeqId seq, int32_t length, std::vector<ChunkCopy>* copies) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no live sequence ", seq));
  Node* leaf = it->second.leaf;
  const int32_t total = leaf->depth_tokens + leaf->size();
  if (length < 1 || length > total) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot truncate a ", total, "-token sequence to ", length, " tokens"));
  }
  if (length == total) return absl::OkStatus();
  const int32_t c = chunk_size_;
  if (leaf->refcount == 1 && leaf->children.empty() && length > leaf->depth_tokens) {
    // The usual case: the candidates grew this sequence's own leaf in place. Drop them there.
    ++clock_;
    ++shape_version_;  // row lengths shrink: no plan of the old shape may be advanced
    const int32_t keep = length - leaf->depth_tokens;
    leaf->tokens.resize(static_cast<size_t>(keep));
    const size_t chunks_kept = static_cast<size_t>((leaf->first_slot + keep - 1) / c + 1);
    for (size_t k = chunks_kept; k < leaf->chunks.size(); ++k) pool_->Free(leaf->chunks[k]);
    leaf->chunks.resize(std::min(chunks_kept, leaf->chunks.size()));
    leaf->last_use = clock_;
    SyncBlocks(leaf);
    return absl::OkStatus();
  }
  // The cut lies in a node others use (or one above the leaf): end the sequence at the cut,
  // splitting the node there, and free what no one uses any more below it.
  Node* end = leaf;
  while (end->depth_tokens >= length) end = end->parent;
  if (end->depth_tokens + end->size() > length && (end->first_slot + length - end->depth_tokens) % c != 0 &&
      pool_->chunks_free() == 0) {
    // The split needs a chunk for its copy: from a cached leaf (never one a live sequence
    // uses), or the truncation fails before changing anything.
    Evict(1);
    if (pool_->chunks_free() == 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "[kv] cutting sequence ", seq, " inside a shared node needs a free chunk; none is"));
    }
  }
  ++clock_;
  ++shape_version_;
  const size_t copies_before = copies->size();
  if (end->depth_tokens + end->size() > length) {
    end = Split(end, length - end->depth_tokens, copies);
  }
  for (Node* p = leaf; p != end; p = p->parent) {
    BANYAN_CHECK(p->refcount > 0) << "refcount underflow truncating sequence " << seq;
    --p->refcount;
    p->last_use = clock_;
  }
  leaf->seqs_ending.erase(seq);
  end->seqs_ending.insert(seq);
  it->second.leaf = end;
  std::set<ChunkId> freed;
  for (Node* n = leaf; n != end && n->refcount == 0 && n->children.empty() &&
                       n->seqs_ending.empty();) {
    Node* parent = n->parent;
    for (ChunkId ch : n->chunks) {
      pool_->Free(ch);
      if (!pool_->IsAllocated(ch)) freed.insert(ch);  // a packed chunk may have other holders
    }
    n->chunks.clear();
    ForgetBlocks(n);
    Unlink(n);  // destroys n
    n = parent;
  }
  // A split's copy into a chunk freed just now must not run: the chunk may be reused.
  auto dead = [&](const ChunkCopy& cp) { return freed.contains(cp.dst); };
  copies->erase(std::remove_if(copies->begin() + static_cast<std::ptrdiff_t>(copies_before),
                               copies->end(), dead),
                copies->end());
  return absl::OkStatus();
}

int32_t PrefixTree::Evict(int32_t n_chunks) {
  if (n_chunks <= 0) return 0;
  using Entry = std::pair<uint64_t, Node*>;  // (last_use, node): oldest first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  auto evictable = [](const Node* n) {
    return n->parent != nullptr && n->refcount == 0 && n->children.empty();
  };
  std::vector<Node*> stack;
  for (auto& [ns, root] : roots_) stack.push_back(root.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (evictable(n)) heap.emplace(n->last_use, n);
    for (auto& [tok, child] : n->children) stack.push_back(child.get());
  }
  int32_t freed = 0;
  while (freed < n_chunks && !heap.empty()) {
    Node* n = heap.top().second;
    heap.pop();
    for (ChunkId c : n->chunks) {
      pool_->Free(c);
      freed += pool_->IsAllocated(c) ? 0 : 1;  // a packed chunk may have other holders
    }
    ForgetBlocks(n);
    Node* parent = n->parent;
    Unlink(n);  // destroys n
    if (evictable(parent)) heap.emplace(parent->last_use, parent);
  }
  return freed;
}

int32_t PrefixTree::Length(SeqId seq) const {
  const Node* leaf = seqs_.at(seq).leaf;
  return leaf->depth_tokens + leaf->size();
}

std::vector<const PrefixTree::Node*> PrefixTree::Path(SeqId seq) const {
  std::vector<const Node*> path;
  for (const Node* p = seqs_.at(seq).leaf; p->parent != nullptr; p = p->parent) {
    path.push_back(p);
  }
  std::reverse(path.begin(), path.end());
  return path;
}

int32_t PrefixTree::LastToken(SeqId seq) const { return seqs_.at(seq).leaf->tokens.back(); }

SlotRef PrefixTree::LastSlot(SeqId seq) const {
  const Node* leaf = seqs_.at(seq).leaf;
  BANYAN_CHECK(leaf->size() > 0) << "sequence " << seq << " ends at an empty node";
  return leaf->SlotOf(leaf->size() - 1, chunk_size_);
}

namespace {
const PrefixTree::Node* NodeAt(const PrefixTree::Node* leaf, int32_t pos) {
  const PrefixTree::Node* n = leaf;
  while (n != nullptr && n->depth_tokens > pos) n = n->parent;
  BANYAN_CHECK(n != nullptr && pos >= 0 && pos < n->depth_tokens + n->size())
      << "position " << pos << " is not in the sequence";
  return n;
}
}  // namespace

int32_t PrefixTree::TokenAt(SeqId seq, int32_t pos) const {
  const Node* n = NodeAt(seqs_.at(seq).leaf, pos);
  return n->tokens[static_cast<size_t>(pos - n->depth_tokens)];
}

SlotRef PrefixTree::SlotAt(SeqId seq, int32_t pos) const {
  const Node* n = NodeAt(seqs_.at(seq).leaf, pos);
  return n->SlotOf(pos - n->depth_tokens, chunk_size_);
}

std::vector<int32_t> PrefixTree::Tokens(SeqId seq) const {
  std::vector<int32_t> tokens;
  for (const Node* n : Path(seq)) tokens.insert(tokens.end(), n->tokens.begin(), n->tokens.end());
  return tokens;
}

std::vector<SlotRef> PrefixTree::Slots(SeqId seq, int32_t begin, int32_t end) const {
  std::vector<SlotRef> slots;
  for (const Node* n : Path(seq)) {
    int32_t lo = std::max(begin, n->depth_tokens);
    int32_t hi = std::min(end, n->depth_tokens + n->size());
    for (int32_t pos = lo; pos < hi; ++pos) {
      slots.push_back(n->SlotOf(pos - n->depth_tokens, chunk_size_));
    }
  }
  return slots;
}

std::vector<SeqId> PrefixTree::DfsOrder() const {
  std::vector<SeqId> order;
  std::vector<const Node*> stack;
  for (auto it = roots_.rbegin(); it != roots_.rend(); ++it) stack.push_back(it->second.get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    order.insert(order.end(), n->seqs_ending.begin(), n->seqs_ending.end());
    for (auto it = n->children.rbegin(); it != n->children.rend(); ++it) {
      stack.push_back(it->second.get());
    }
  }
  return order;
}

MemoryStats PrefixTree::Stats() const {
  MemoryStats stats;
  stats.chunks_total = pool_->chunks_total();
  stats.chunks_free = pool_->chunks_free();
  std::vector<const Node*> stack;
  std::unordered_set<ChunkId> packed;  // a shared chunk counts once
  for (auto& [ns, root] : roots_) stack.push_back(root.get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n->parent != nullptr) {
      ++stats.nodes;
      int32_t chunks = static_cast<int32_t>(n->chunks.size());
      if (n->packed) chunks = packed.insert(n->chunks[0]).second ? 1 : 0;
      (n->refcount > 0 ? stats.chunks_live : stats.chunks_cached) += chunks;
      // Stored once, used by refcount sequences: refcount - 1 copies saved (MemoryStats).
      if (n->refcount > 1) stats.chunks_saved_by_sharing += int64_t{chunks} * (n->refcount - 1);
    }
    for (auto& [tok, child] : n->children) stack.push_back(child.get());
  }
  // The chunk ExtendPacked is filling counts as live while the tree holds it.
  if (pack_chunk_ != kNoChunk && !packed.contains(pack_chunk_)) ++stats.chunks_live;
  stats.live_sequences = static_cast<int32_t>(seqs_.size());
  return stats;
}

absl::Status PrefixTree::CheckInvariants() const {
  std::unordered_map<const Node*, int32_t> expected_refs;
  for (auto& [id, s] : seqs_) {
    if (!s.leaf->seqs_ending.contains(id)) {
      return absl::InternalError(absl::StrCat("sequence ", id, " missing from its leaf"));
    }
    for (const Node* p = s.leaf; p->parent != nullptr; p = p->parent) ++expected_refs[p];
  }
  std::unordered_set<ChunkId> owned;
  std::unordered_map<ChunkId, int32_t> packed_holders;  // packed nodes per shared chunk
  int32_t ending = 0;
  std::vector<const Node*> stack;
  for (auto& [ns, root] : roots_) {
    if (!root->tokens.empty() || !root->chunks.empty() || root->refcount != 0) {
      return absl::InternalError(absl::StrCat("root of namespace '", ns, "' holds tokens"));
    }
    stack.push_back(root.get());
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    ending += static_cast<int32_t>(n->seqs_ending.size());
    for (SeqId id : n->seqs_ending) {
      auto it = seqs_.find(id);
      if (it == seqs_.end() || it->second.leaf != n) {
        return absl::InternalError(absl::StrCat("node lists sequence ", id, " wrongly"));
      }
    }
    if (n->parent != nullptr) {
      auto it = expected_refs.find(n);
      int32_t want = it == expected_refs.end() ? 0 : it->second;
      if (n->refcount != want) {
        return absl::InternalError(
            absl::StrCat("refcount ", n->refcount, " but ", want, " live sequences pass"));
      }
      if (n->tokens.empty()) return absl::InternalError("non-root node without tokens");
      // A pending token is the last of a live sequence's own leaf, or nowhere (Release drops it).
      for (size_t i = 0; i < n->tokens.size(); ++i) {
        if (n->tokens[i] == kPendingToken &&
            (i + 1 != n->tokens.size() || n->seqs_ending.size() != 1 || !n->children.empty())) {
          return absl::InternalError(absl::StrCat("pending token at ", i, " of a ",
                                                  n->tokens.size(), "-token node with ",
                                                  n->seqs_ending.size(), " live sequences"));
        }
      }
      if (n->first_slot < 0 || n->first_slot >= chunk_size_) {
        return absl::InternalError(absl::StrCat("bad first_slot ", n->first_slot));
      }
      size_t want_chunks = CeilDiv(n->first_slot + n->size(), chunk_size_);
      if (n->chunks.size() != want_chunks) {
        return absl::InternalError(absl::StrCat("node of ", n->size(), " tokens at slot ",
                                                n->first_slot, " has ", n->chunks.size(),
                                                " chunks, want ", want_chunks));
      }
      if (n->packed && n->chunks.size() != 1) {
        return absl::InternalError(absl::StrCat("packed node across ", n->chunks.size(), " chunks"));
      }
      for (ChunkId c : n->chunks) {
        if (!pool_->IsAllocated(c)) {
          return absl::InternalError(absl::StrCat("chunk ", c, " owned but free in the pool"));
        }
        if (n->packed) {
          ++packed_holders[c];
          continue;
        }
        if (!owned.insert(c).second) {
          return absl::InternalError(absl::StrCat("chunk ", c, " owned by two nodes"));
        }
      }
    }
    for (auto& [tok, child] : n->children) {
      if (child->parent != n || child->tokens.empty() || child->tokens[0] != tok) {
        return absl::InternalError("child link or key broken");
      }
      if (child->depth_tokens != n->depth_tokens + n->size()) {
        return absl::InternalError("child depth does not follow its parent");
      }
      stack.push_back(child.get());
    }
  }
  if (ending != static_cast<int32_t>(seqs_.size())) {
    return absl::InternalError("live sequence count does not match the leaves");
  }
  if (pack_chunk_ != kNoChunk) ++packed_holders[pack_chunk_];
  for (auto [c, holders] : packed_holders) {
    if (!owned.insert(c).second) {
      return absl::InternalError(absl::StrCat("chunk ", c, " owned by a packed node and another"));
    }
    if (pool_->holders(c) != holders) {
      return absl::InternalError(absl::StrCat("packed chunk ", c, " has ", pool_->holders(c),
                                              " holders in the pool, ", holders, " in the tree"));
    }
  }
  if (static_cast<int32_t>(owned.size()) != pool_->chunks_used()) {
    return absl::InternalError(absl::StrCat("tree owns ", owned.size(), " chunks, pool says ",
                                            pool_->chunks_used(), " used"));
  }
  return absl::OkStatus();
}

}  // namespace banyan::kvcache
