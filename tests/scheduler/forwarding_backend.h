// A test backend that forwards to another backend: tests derive from it and override the one
// call whose behaviour they change (a failure injected, a cost added). LaunchSample and
// CollectSample are the Backend defaults over the forwarded Forward.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/backend.h"

namespace banyan::scheduler {

class ForwardingBackend : public engine::Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<engine::Backend> inner) : inner_(std::move(inner)) {}
  int32_t num_chunks() const override { return inner_->num_chunks(); }
  int32_t chunk_size() const override { return inner_->chunk_size(); }
  absl::Status CopyChunks(std::span<const kvcache::ChunkCopy> c) override {
    return inner_->CopyChunks(c);
  }
  absl::Status Forward(const engine::StepBatch& b, std::vector<float>* logits) override {
    return inner_->Forward(b, logits);
  }
  absl::Status HiddenRows(std::span<const int32_t> rows, std::vector<float>* out) const override {
    return inner_->HiddenRows(rows, out);
  }
  absl::Status DraftTrees(const engine::DraftHeads& heads, std::span<const int32_t> rows,
                          std::span<const int32_t> roots, std::span<const int32_t> branching,
                          std::vector<engine::DraftHeads::Tree>* out) override {
    return inner_->DraftTrees(heads, rows, roots, branching, out);
  }

 private:
  std::unique_ptr<engine::Backend> inner_;
};

}  // namespace banyan::scheduler
