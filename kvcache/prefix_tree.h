// PrefixTree: the chunked prefix tree that stores every sequence's KV slots, sharing every
// common prefix (ChunkAttention's prefix-aware KV cache).
//
// Model
//  - One radix tree per cache namespace (tenant / cache_salt): prefixes are never shared across
//    namespaces, so no tenant can observe another's cache through timing.
//  - A node holds a maximal run of tokens and the chunks their KV lives in. Token i of a node sits
//    in global slot g = first_slot + i of the node: chunk chunks[g / c], slot g % c. Slots are
//    contiguous, so every chunk of a node is full except possibly the first (which starts at
//    first_slot, only after a mid-chunk split) and the last.
//  - Children are keyed by their first token. Matching takes the child with the longest match;
//    two children may start with the same token only when a decoding sequence declined to split
//    a live sibling (see Appending) or took a pending fork (see AppendPending).
//  - A live sequence is a path root → leaf node and always ends at the end of its leaf node.
//    Several sequences may end at the same node (right after Fork).
//  - refcount(node) = number of live sequences whose path contains the node.
//  - Each chunk is owned by exactly one node. A node with refcount 0 is "cached": it keeps its
//    chunks for future prefix matches until Evict frees it (LRU by last use, leaves first).
//
// Splitting. When a new token list diverges inside a node, the node is split at the divergence
// point. If that point is mid-chunk, the straddled chunk cannot belong to both halves, so the
// smaller of the two parts (< c tokens) is copied into a fresh chunk at the same slot positions.
// The copy is reported as a ChunkCopy for the backend to apply to its KV memory. Re-packing the
// lower half so that it starts at slot 0 (which would keep "only the last chunk is partial")
// would copy the whole lower half; the first_slot offset costs at most one partial chunk per
// node instead. The same-slot copy keeps the KV positions of every token unchanged.
//
// Appending. A sequence grows in place when it alone uses its leaf and the leaf has no children;
// otherwise the new token goes into a child node. If a child starting with that token already
// exists (written in the same step by another row, or a one-token cached node), the sequence
// moves into it and its KV is reused (needs_write == false). A longer child starting with the
// token is never split by a one-token append (a sequence following another one token behind
// would split it at every step: a node and a chunk per token): a cached one is dropped (the
// sequence recomputes those tokens anyway), a live one gets a sibling with the same first token.
//
// Memory errors. Every operation that needs chunks computes how many it needs first and fails
// with ResourceExhausted before changing anything when the pool cannot supply them (after
// evicting cached nodes not on its own path, when allow_evict is set).
//
// Shape version. shape_version() changes whenever the set of nodes, a node's chunk list, or the
// set of live sequences changes. Appending a token into a non-full chunk leaves it unchanged; an
// AttentionPlan built at that version then only needs its lengths advanced.
//
// KV events. With an event log attached (set_event_log), the tree reports the full
// position-aligned blocks its paths hold as they appear and go (kvcache/kv_events.h says what
// counts as stored and why splits report nothing). Each node then keeps the hashes of the blocks
// that end in it; without a log it keeps none and reports nothing.
//
// Not thread-safe: the engine thread owns the tree.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/kv_events.h"

namespace banyan::kvcache {

using SeqId = int64_t;

// Where one token's KV lives.
struct SlotRef {
  ChunkId chunk;
  int32_t slot;
  bool operator==(const SlotRef&) const = default;
};

// Copy KV slots [slot_begin, slot_end) of chunk src into chunk dst, every layer, K and V: into
// the same slots (a split's copy), or from dst_begin on (a speculative candidate's KV moved to
// where its sequence continues). A list of copies runs in order.
struct ChunkCopy {
  ChunkId src;
  ChunkId dst;
  int32_t slot_begin;
  int32_t slot_end;
  int32_t dst_begin = -1;  // -1: slot_begin
  int32_t DstBegin() const { return dst_begin < 0 ? slot_begin : dst_begin; }
};

// Result of placing tokens (Insert / Extend / Append).
struct PlaceResult {
  SeqId seq = -1;
  // How many of the given tokens were found in the tree already; their KV exists and must not be
  // recomputed. The remaining tokens' slots are in new_slots, in order, and need their KV written.
  int32_t matched_tokens = 0;
  std::vector<SlotRef> new_slots;
  // Chunk copies caused by splits; apply them before writing new KV.
  std::vector<ChunkCopy> copies;
};

struct MemoryStats {
  int32_t chunks_total = 0;
  int32_t chunks_free = 0;
  int32_t chunks_live = 0;    // owned by nodes that a live sequence uses
  int32_t chunks_cached = 0;  // owned by nodes no live sequence uses (evictable)
  // What sharing saves now: each live node's chunks times (refcount - 1), the copies a
  // separate store per sequence would hold of the chunks stored once. Never negative. (It was
  // once sum(ceil(len / c)) - chunks_live, which also charged the tree's own layout to
  // sharing: a node that starts mid-chunk and a leaf's chunk reserved for its next append cost
  // a chunk that ceil(len / c) does not count, so the difference went negative under load
  // with many short shared prefixes, while sharing was saving.)
  int64_t chunks_saved_by_sharing = 0;
  int32_t live_sequences = 0;
  int32_t nodes = 0;
};

class PrefixTree {
 public:
  struct Node;

  explicit PrefixTree(ChunkPool* pool);
  ~PrefixTree();
  PrefixTree(const PrefixTree&) = delete;
  PrefixTree& operator=(const PrefixTree&) = delete;

  // Length of the longest prefix of `tokens` stored in namespace `ns`. When `cached_chunks` is
  // given, it receives the number of chunks on the matched path that no live sequence uses:
  // chunks that admitting this prefix would turn from cached (evictable) into live.
  int32_t Match(std::string_view ns, std::span<const int32_t> tokens,
                int32_t* cached_chunks = nullptr) const;

  // Starts a live sequence holding `tokens` (non-empty), reusing the longest cached prefix.
  // The whole list may match (matched_tokens == tokens.size()): the caller then recomputes the
  // last token's logits without writing its KV.
  absl::StatusOr<PlaceResult> Insert(std::string_view ns, std::span<const int32_t> tokens,
                                     bool allow_evict = false);

  // Appends tokens to live sequence `seq` (chunked prefill, or decode with one token).
  absl::StatusOr<PlaceResult> Extend(SeqId seq, std::span<const int32_t> tokens,
                                     bool allow_evict = false);
  // Extend for speculation's candidate trees (scheduler/loop/speculation.cc): the nodes it
  // creates are packed, one after another into a chunk they share (opened by the first of them
  // and by any that does not fit; EndPacking closes it), instead of a chunk each. A packed node
  // never grows in place and splits without a copy. A tree of 28 one-token candidates then holds
  // 28 slots of one or two chunks, not 28 chunks. Nodes longer than a chunk are placed as
  // Extend places them. Never evicts.
  absl::StatusOr<PlaceResult> ExtendPacked(SeqId seq, std::span<const int32_t> tokens);
  // Closes the chunk ExtendPacked fills (the tree's hold on it; its nodes keep theirs). Call
  // once a step's candidates are placed.
  void EndPacking();
  absl::StatusOr<PlaceResult> Append(SeqId seq, int32_t token, bool allow_evict = false) {
    return Extend(seq, std::span<const int32_t>(&token, 1), allow_evict);
  }

  // Appends one token to each of several distinct live sequences (a decode step). When every
  // sequence ending at a childless node appends the same token, and no other sequence passes
  // through it, the node grows in place for all of them (one slot, written once): n samples that
  // agree keep sharing one node instead of growing a chain of one-token nodes. Otherwise each
  // appends as Append does. Results are in the order of `items`; all or nothing on memory.
  absl::StatusOr<std::vector<PlaceResult>> AppendBatch(
      std::span<const std::pair<SeqId, int32_t>> items, bool allow_evict = false);

  // Decoding a step ahead (the engine loop's fed steps, engine/backend.h): the next token of a
  // sequence is placed before it is known, then set once it is.
  // GrowsInPlace: whether `seq`'s next token grows its leaf in place whatever the token is (it
  // alone uses its leaf, which has no children).
  // AppendPending: appends kPendingToken to each of `seqs` (live, none with a pending token yet),
  // at a slot that does not depend on the token: in place where the sequence GrowsInPlace, else
  // into a new one-token child of its leaf that the sequence alone uses (a "pending fork": n
  // samples that share a leaf, or a leaf with a cached continuation below it). A pending fork
  // is keyed by kPendingToken until it is set. All or nothing on memory, as AppendBatch.
  // SetPendingToken: the pending last token of `seq` becomes `token`; a pending fork is keyed by
  // it from then on, beside any sibling with the same first token (as a decoding sequence's
  // sibling of a live child is), and a cached longer sibling starting with it is dropped as a
  // stale duplicate (as Append drops it). Until then nothing may place into, match against or
  // fork these sequences (kPendingToken matches no token, so a match would only be short);
  // releasing one (its step failed) drops the pending token, and a pending fork with it.
  // Samples that would have agreed on the token no longer share its node: a pending fork costs
  // a chunk per sample where an unfed step would share one, until the sequence ends.
  static constexpr int32_t kPendingToken = -1;
  bool GrowsInPlace(SeqId seq) const;
  absl::StatusOr<std::vector<PlaceResult>> AppendPending(std::span<const SeqId> seqs,
                                                         bool allow_evict = false);
  absl::Status SetPendingToken(SeqId seq, int32_t token);

  // Chunks Append(seq, token) would take from the pool now (0, 1 or 2). An upper bound for the
  // same append inside an AppendBatch.
  int32_t AppendChunksNeeded(SeqId seq, int32_t token) const;

  // Chunks that only the given live sequences use (every sequence through the node is among
  // them): what releasing them all would turn from live into cached.
  int32_t ChunksOnlyUsedBy(std::span<const SeqId> seqs) const;

  // Makes n sequences of `seq` (n >= 1): returns n ids, `seq` first, all sharing its whole path.
  // Needs no memory.
  absl::StatusOr<std::vector<SeqId>> Fork(SeqId seq, int n);

  // Ends a live sequence. Its nodes stay cached.
  absl::Status Release(SeqId seq);

  // Shortens live sequence `seq` to its first `length` tokens (1 <= length <= its length): the
  // rejected candidates of a speculative step. Tokens that only this sequence used are dropped
  // and their chunks go back to the pool at once; a node that others use (or that is cached)
  // and is cut inside is split, its chunk copies appended to `copies` (apply them before the
  // next KV writes, as Place's). A split inside a chunk needs a free chunk (a cached leaf is
  // evicted for it): without one, ResourceExhausted and nothing changed.
  absl::Status Truncate(SeqId seq, int32_t length, std::vector<ChunkCopy>* copies);

  // Frees at least `n_chunks` chunks by evicting cached leaves, least recently used first, when
  // possible. Never touches a node a live sequence uses. Returns the number freed.
  int32_t Evict(int32_t n_chunks);

  // --- reads ---
  bool IsLive(SeqId seq) const { return seqs_.contains(seq); }
  int32_t Length(SeqId seq) const;
  std::vector<int32_t> Tokens(SeqId seq) const;
  int32_t LastToken(SeqId seq) const;  // O(1)
  SlotRef LastSlot(SeqId seq) const;   // the slot of the last token; O(1)
  // Token and slot at position `pos` of `seq`; O(nodes between it and the end).
  int32_t TokenAt(SeqId seq, int32_t pos) const;
  SlotRef SlotAt(SeqId seq, int32_t pos) const;
  // Slots of positions [begin, end) of `seq`.
  std::vector<SlotRef> Slots(SeqId seq, int32_t begin, int32_t end) const;
  // Nodes of the sequence's path, root's child first.
  std::vector<const Node*> Path(SeqId seq) const;
  // All live sequences in depth-first order: the sequences through any node form a contiguous
  // run. Sequences ending at the same node are ordered by id.
  std::vector<SeqId> DfsOrder() const;

  // KV events (see the top of this file): attach before the first placement (checked); null
  // detaches. The log must outlive the tree or be detached first.
  void set_event_log(KvEventLog* log);
  // Every full block of every path, recomputed from the tokens (not from the nodes' hashes),
  // parents before children; duplicates (two nodes holding the same tokens) appear twice. For
  // audits, the debug view and a resync. O(tokens in the tree).
  std::vector<FullBlock> FullBlocks() const;

  uint64_t shape_version() const { return shape_version_; }
  int32_t chunk_size() const { return chunk_size_; }
  MemoryStats Stats() const;

  // Full structural audit (for tests and debug builds): token runs, chunk ownership, slot
  // ranges, refcounts against live sequences, pool counters. OK or a description of the fault.
  absl::Status CheckInvariants() const;

  struct Node {
    Node* parent = nullptr;
    std::vector<int32_t> tokens;
    std::vector<ChunkId> chunks;
    int32_t first_slot = 0;       // slot of tokens[0] in chunks[0]
    bool packed = false;          // ExtendPacked's: its one chunk is shared with other packed nodes
    int32_t refcount = 0;         // live sequences whose path contains this node
    int32_t depth_tokens = 0;     // tokens on the path above this node
    uint64_t last_use = 0;        // LRU clock value of the last release / use
    std::set<SeqId> seqs_ending;  // live sequences whose leaf is this node
    // Keyed by first token. Usually one child per token; a decoding sequence that diverges from
    // a *live* longer sibling only in timing (it would follow it one token behind, splitting it
    // at every step) gets a sibling of its own with the same first token instead, and so does a
    // pending fork (keyed by kPendingToken until its token is set).
    std::multimap<int32_t, std::unique_ptr<Node>> children;
    // With an event log: hashes of the full blocks that end in this node (block k ends at
    // position (k + 1) * c with depth_tokens < (k + 1) * c <= depth_tokens + size()), in order;
    // a block holding a pending token is left out until the token is set.
    std::vector<uint64_t> block_hashes;
    std::string ns;        // a root: its namespace (events carry it); empty elsewhere
    uint64_t ns_seed = 0;  // a root: NamespaceSeed(ns), the parent hash of its first blocks

    int32_t size() const { return static_cast<int32_t>(tokens.size()); }
    SlotRef SlotOf(int32_t i, int32_t chunk_size) const;
    // Slot range [begin, end) used in chunks[k].
    std::pair<int32_t, int32_t> SlotRange(size_t k, int32_t chunk_size) const;
  };

 private:
  struct Sequence {
    Node* leaf;
    std::string ns;
  };
  struct Cursor;  // where a placement walk stopped

  Node* Root(std::string_view ns);
  const Node* FindRoot(std::string_view ns) const;
  // decode: a one-token append, which only enters a child that it matches whole.
  Cursor Walk(Node* start, std::span<const int32_t> tokens, bool decode = false) const;
  int32_t ChunksNeeded(const Cursor& cur, Node* own_leaf, int32_t remaining) const;
  absl::Status Reserve(int32_t needed) const;
  Node* Split(Node* node, int32_t at, std::vector<ChunkCopy>* copies);
  static void Unlink(Node* child);  // removes (and destroys) child from its parent's children
  absl::StatusOr<PlaceResult> Place(Node* start, Node* own_leaf, SeqId seq,
                                    std::span<const int32_t> tokens, bool allow_evict,
                                    Node** end_out, bool packed = false);
  absl::StatusOr<PlaceResult> ExtendSequence(SeqId seq, std::span<const int32_t> tokens,
                                             bool allow_evict, bool packed);
  // Gives a new node of `n` <= chunk_size tokens its slots in the packing chunk.
  void Pack(Node* node, int32_t n);
  void AppendTokens(Node* node, std::span<const int32_t> tokens, std::vector<SlotRef>* slots);
  void FreeNode(Node* node);
  void DropStaleContinuation(Node* leaf, int32_t token);
  // KV events: brings node's block_hashes up to date after its tokens changed at the end
  // (reporting blocks stored or removed) / reports all of its blocks removed (it goes).
  void SyncBlocks(Node* node);
  void ForgetBlocks(Node* node);

  KvEventLog* log_ = nullptr;

  ChunkPool* pool_;
  int32_t chunk_size_;
  std::map<std::string, std::unique_ptr<Node>, std::less<>> roots_;
  std::unordered_map<SeqId, Sequence> seqs_;
  SeqId next_seq_ = 0;
  uint64_t clock_ = 0;
  uint64_t shape_version_ = 0;
  ChunkId pack_chunk_ = kNoChunk;  // the chunk ExtendPacked fills (the tree holds it once)
  int32_t pack_cursor_ = 0;        // its next free slot
};

}  // namespace banyan::kvcache
