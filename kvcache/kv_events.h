// KV-cache events: what the prefix tree reports about the blocks it holds, for a publisher
// (server/common/kv_event_publisher.h) that tells prefix-aware routers which prefixes are cached here.
//
// Blocks. Routers hash a request's prompt in blocks of block_size tokens counted from position 0
// (vLLM's blocks). banyan's chunks are not aligned that way: a node's first chunk may start
// mid-chunk after a split, and a child of a node that ends mid-chunk starts in a fresh chunk.
// So the events describe logical blocks, not chunks: block k of a cached path is its tokens
// [k * c, (k + 1) * c), c = the chunk size (reported as block_size). A block is *stored* while
// some path of the tree holds all c of its tokens (in one node or across several), none of them
// a pending token (PrefixTree::kPendingToken, a fed step's token not known yet): a partly filled
// chunk is reported once the block it ends is full. Splits never change which token prefixes the
// tree holds, so a split (and its chunk copy) reports nothing; nor does a chunk copy made for
// speculation. A block is *removed* when no path holds it any more: eviction, a truncation
// (rejected speculative candidates, a failed pending token), a stale continuation dropped.
//
// Hashes. A block's hash chains its parent's (the block before it on the path) with its token
// ids; the first block of a path chains from its namespace's seed, so identical prefixes of two
// tenants (cache namespaces) hash differently, as vLLM folds cache_salt into its first block
// hash. BlockHash / NamespaceSeed below are the whole definition (splitmix64 finalizers: fast,
// well mixed, not cryptographic; a collision can only misdirect a router, never the cache, which
// matches token ids). Deterministic: every replica hashes the same prefix the same way.
//
// Multiplicity. Two nodes may hold the same tokens (a decoding sequence's sibling of a live
// longer node): KvEventLog counts holders per hash and reports a block stored when the first
// one appears and removed when the last one goes. A subscriber that applies the events in
// order, as a set of hashes, holds exactly the tree's set of full blocks at every flush.
//
// Threading. The tree, the log and the sink calls all run on the engine thread. A sink must
// not block: it queues and returns.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace banyan::kvcache {

// Hash of a namespace's empty prefix: the parent of every first block in it.
uint64_t NamespaceSeed(std::string_view ns);
// Hash of a block: its parent's hash (NamespaceSeed for a first block) and its token ids.
uint64_t BlockHash(uint64_t parent, std::span<const int32_t> tokens);

struct KvEvent {
  enum class Kind { kStored, kRemoved, kAllCleared };
  Kind kind = Kind::kStored;
  uint64_t hash = 0;               // kStored, kRemoved
  std::optional<uint64_t> parent;  // kStored: the block before it; none for a first block
  std::vector<int32_t> tokens;     // kStored: the block's token ids (block_size of them)
  // kStored: the tenant's cache namespace. For a consumer inside the daemon that must keep
  // tenants apart; the ZeroMQ publisher does not send it (the hash already separates them).
  std::string ns;
};

// Receives each engine step's events at the step boundary (engine thread). Must return without
// waiting: queue, never block on I/O or on another thread's work.
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  virtual void Publish(std::vector<KvEvent> events) = 0;
  // True (once) when the sink lost events it had accepted (a bounded queue dropped them): the
  // next flush then sends the whole state (KvEventLog::Flush).
  virtual bool TakeResyncRequest() { return false; }
};

// One full block of the tree as recomputed from scratch (PrefixTree::FullBlocks).
struct FullBlock {
  uint64_t hash = 0;
  std::optional<uint64_t> parent;
  std::vector<int32_t> tokens;
  std::string ns;
};

// Collects the tree's block reports between flushes (PrefixTree::set_event_log). Not
// thread-safe: the engine thread owns it.
class KvEventLog {
 public:
  // A holder of block `hash` appeared / went.
  void Stored(uint64_t hash, std::optional<uint64_t> parent, std::span<const int32_t> tokens,
              std::string_view ns);
  void Removed(uint64_t hash);
  // The tree holds no block any more (every holder went): AllBlocksCleared, once, after the
  // removals already reported. Checked: no block may be held.
  void AllCleared();

  // Hands the events since the last flush to `sink` (nothing when there are none). When the
  // sink asks for a resync, sends instead AllBlocksCleared and then every block of `snapshot`
  // (the tree's FullBlocks, parents first), and recounts from it.
  void Flush(KvEventSink* sink, const std::vector<FullBlock>* snapshot_or_null);
  // Whether Flush needs a snapshot (the sink asked for a resync); call before Flush.
  bool WantsSnapshot(KvEventSink* sink);

  // Distinct blocks held now, and holders per hash (tests compare them with FullBlocks).
  size_t blocks() const { return holders_.size(); }
  const absl::flat_hash_map<uint64_t, int32_t>& holders() const { return holders_; }
  size_t pending_events() const { return pending_.size(); }

 private:
  absl::flat_hash_map<uint64_t, int32_t> holders_;
  std::vector<KvEvent> pending_;
  bool resync_ = false;  // WantsSnapshot said yes: the next Flush sends the snapshot
};

}  // namespace banyan::kvcache
