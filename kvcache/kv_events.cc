#include "kvcache/kv_events.h"

#include "common/check.h"

namespace banyan::kvcache {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// splitmix64's finalizer.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t NamespaceSeed(std::string_view ns) {
  // FNV-1a over the bytes, then mixed; the empty namespace ("" = no tenant salt) included.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : ns) h = (h ^ ch) * 0x100000001b3ull;
  return Mix64(h ^ (ns.size() * kGolden));
}

uint64_t BlockHash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = Mix64(parent ^ (tokens.size() * kGolden));
  for (int32_t t : tokens) h = Mix64(h + kGolden + static_cast<uint32_t>(t));
  return h;
}

void KvEventLog::Stored(uint64_t hash, std::optional<uint64_t> parent,
                        std::span<const int32_t> tokens, std::string_view ns) {
  if (++holders_[hash] != 1) return;
  KvEvent& e = pending_.emplace_back();
  e.kind = KvEvent::Kind::kStored;
  e.hash = hash;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.ns = std::string(ns);
}

void KvEventLog::Removed(uint64_t hash) {
  auto it = holders_.find(hash);
  BANYAN_CHECK(it != holders_.end()) << "[kv] block " << hash << " removed but never stored";
  if (--it->second > 0) return;
  holders_.erase(it);
  KvEvent& e = pending_.emplace_back();
  e.kind = KvEvent::Kind::kRemoved;
  e.hash = hash;
}

void KvEventLog::AllCleared() {
  BANYAN_CHECK(holders_.empty()) << "[kv] cache cleared with " << holders_.size()
                                 << " blocks still held";
  pending_.emplace_back().kind = KvEvent::Kind::kAllCleared;
}

bool KvEventLog::WantsSnapshot(KvEventSink* sink) {
  if (sink != nullptr && sink->TakeResyncRequest()) resync_ = true;
  return resync_;
}

void KvEventLog::Flush(KvEventSink* sink, const std::vector<FullBlock>* snapshot) {
  if (resync_ && snapshot != nullptr) {
    resync_ = false;
    pending_.clear();
    holders_.clear();
    pending_.emplace_back().kind = KvEvent::Kind::kAllCleared;
    for (const FullBlock& b : *snapshot) Stored(b.hash, b.parent, b.tokens, b.ns);
  }
  if (sink == nullptr) {
    pending_.clear();
    return;
  }
  if (pending_.empty()) return;
  std::vector<KvEvent> events;
  events.swap(pending_);
  sink->Publish(std::move(events));
}

}  // namespace banyan::kvcache
