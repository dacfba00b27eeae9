#include "kvcache/chunk_pool.h"

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace banyan::kvcache {

absl::StatusOr<ChunkPool> ChunkPool::Create(int32_t num_chunks, int32_t chunk_size) {
  if (chunk_size < kMinChunkSize || chunk_size > kMaxChunkSize) {
    return absl::InvalidArgumentError(absl::StrCat("chunk size must be in [", kMinChunkSize, ", ",
                                                   kMaxChunkSize, "], got ", chunk_size));
  }
  if (num_chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV pool needs at least one chunk, got ", num_chunks));
  }
  return ChunkPool(num_chunks, chunk_size);
}

ChunkPool::ChunkPool(int32_t num_chunks, int32_t chunk_size)
    : chunk_size_(chunk_size), allocated_(num_chunks, 0), holders_(num_chunks, 0) {
  free_list_.reserve(num_chunks);
  // Highest id at the bottom so that a fresh pool hands out 0, 1, 2, ...
  for (int32_t id = num_chunks - 1; id >= 0; --id) free_list_.push_back(id);
}

absl::StatusOr<ChunkId> ChunkPool::Allocate() {
  if (free_list_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("[kv] pool exhausted: ", chunks_total(), " chunks all in use"));
  }
  ChunkId id = free_list_.back();
  free_list_.pop_back();
  BANYAN_CHECK(!allocated_[id]) << "chunk " << id << " on the free list twice";
  allocated_[id] = 1;
  holders_[id] = 1;
  return id;
}

void ChunkPool::Free(ChunkId id) {
  BANYAN_CHECK(id >= 0 && id < chunks_total()) << "bad chunk id " << id;
  BANYAN_CHECK(allocated_[id] == 1) << "double free of chunk " << id;
  if (--holders_[id] > 0) return;
  if (holding_) {
    allocated_[id] = 2;
    held_.push_back(id);
    return;
  }
  allocated_[id] = 0;
  free_list_.push_back(id);
}

void ChunkPool::Retain(ChunkId id) {
  BANYAN_CHECK(IsAllocated(id)) << "retaining chunk " << id << ", which is not allocated";
  ++holders_[id];
}

bool ChunkPool::IsAllocated(ChunkId id) const {
  return id >= 0 && id < chunks_total() && allocated_[id] == 1;
}

void ChunkPool::HoldFreed() {
  BANYAN_CHECK(!holding_) << "HoldFreed is not nested";
  holding_ = true;
}

void ChunkPool::ReleaseHeld() {
  holding_ = false;
  for (ChunkId id : held_) {
    allocated_[id] = 0;
    free_list_.push_back(id);
  }
  held_.clear();
}

}  // namespace banyan::kvcache
