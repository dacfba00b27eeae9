// ChunkPool: a fixed set of KV-cache chunks, each `chunk_size` token slots (for every layer).
//
// Invariants:
//  - capacity is fixed at construction; memory is never returned to the OS;
//  - a chunk id is either free (on the free list exactly once) or allocated, never both;
//  - Allocate and Free are O(1); chunks_used() + chunks_free() == chunks_total().
//
// The pool only hands out ids. The backend owns the KV memory the ids index
// ([layer][chunk][k|v][kv_head][chunk_size][head_dim] on the CPU backend).
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace banyan::kvcache {

using ChunkId = int32_t;
inline constexpr ChunkId kNoChunk = -1;
inline constexpr int32_t kMinChunkSize = 16;
inline constexpr int32_t kMaxChunkSize = 256;

class ChunkPool {
 public:
  // Fails when chunk_size is outside [16, 256] or num_chunks < 1.
  static absl::StatusOr<ChunkPool> Create(int32_t num_chunks, int32_t chunk_size);

  // ResourceExhausted when no chunk is free.
  absl::StatusOr<ChunkId> Allocate();
  // `id` must be allocated (checked). Drops one holder of the chunk (Allocate makes one, Retain
  // another); with the last the chunk is freed. While chunks are held (HoldFreed), a freed
  // chunk is set aside instead: not allocated any more, but not on the free list either.
  void Free(ChunkId id);
  // One more holder of allocated chunk `id`: the prefix tree's packed nodes share a chunk
  // (PrefixTree::ExtendPacked).
  void Retain(ChunkId id);
  int32_t holders(ChunkId id) const { return IsAllocated(id) ? holders_[id] : 0; }
  bool IsAllocated(ChunkId id) const;

  // Holding: between HoldFreed() and ReleaseHeld(), freed chunks are not handed out again, so
  // that a caller may still read what they hold after allocating new chunks (speculation moves
  // accepted candidates' KV out of the chunks their rejected siblings free). ReleaseHeld puts
  // them on the free list. Not nested.
  void HoldFreed();
  void ReleaseHeld();

  int32_t chunk_size() const { return chunk_size_; }
  int32_t chunks_total() const { return static_cast<int32_t>(allocated_.size()); }
  int32_t chunks_free() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t chunks_used() const { return chunks_total() - chunks_free(); }

 private:
  ChunkPool(int32_t num_chunks, int32_t chunk_size);

  int32_t chunk_size_;
  std::vector<ChunkId> free_list_;  // LIFO: recently freed chunks are reused first (warm)
  std::vector<uint8_t> allocated_;  // 1 when the id is handed out, 2 when freed but held
  std::vector<int32_t> holders_;    // of an allocated chunk
  bool holding_ = false;
  std::vector<ChunkId> held_;
};

}  // namespace banyan::kvcache
