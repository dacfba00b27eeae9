// Helpers the speculation tests share: running requests to completion on a fresh engine loop
// over the CPU backend (checking the prefix tree after), comparing two runs' outputs, and a
// one-line summary of the speculation counters.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "engine/cpu/cpu_backend.h"
#include "model/model.h"
#include "text/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "scheduler/generate.h"

namespace banyan::scheduler::testing {

// GenerateAll on a new EngineLoop over a CpuBackend of `chunks` KV chunks of `chunk_size`
// tokens; afterwards the tree's invariants hold and no chunk is still live. `metrics`, when
// given, receives the loop's counters; `stats`, its host-side accounting.
inline absl::StatusOr<std::vector<GenerationResult>> RunOnCpu(
    const model::ModelWeights& weights, const text::Tokenizer* tokenizer,
    std::span<const Request> requests, const LoopOptions& options, int chunks,
    MetricsSnapshot* metrics = nullptr, int chunk_size = 16, LoopStats* stats = nullptr) {
  auto backend =
      engine::CpuBackend::Create(&weights, {.num_chunks = chunks, .chunk_size = chunk_size});
  if (!backend.ok()) return backend.status();
  EngineLoop loop(weights.config, tokenizer, std::move(*backend), options);
  auto results = GenerateAll(loop, requests);
  EXPECT_TRUE(loop.tree().CheckInvariants().ok()) << loop.tree().CheckInvariants();
  EXPECT_EQ(loop.tree().Stats().chunks_live, 0);
  if (metrics != nullptr) *metrics = loop.metrics();
  if (stats != nullptr) *stats = loop.stats();
  return results;
}

// Token-for-token: every sample's tokens, text and finish reason, and each request's
// completion token count.
inline void ExpectSameResults(const std::vector<GenerationResult>& a,
                              const std::vector<GenerationResult>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].samples.size(), b[i].samples.size()) << what << " request " << i;
    for (size_t k = 0; k < a[i].samples.size(); ++k) {
      EXPECT_EQ(a[i].samples[k].tokens, b[i].samples[k].tokens) << what << " request " << i;
      EXPECT_EQ(a[i].samples[k].text, b[i].samples[k].text) << what << " request " << i;
      EXPECT_EQ(a[i].samples[k].finish, b[i].samples[k].finish) << what << " request " << i;
    }
    EXPECT_EQ(a[i].usage.completion_tokens, b[i].usage.completion_tokens) << what << " " << i;
  }
}

// "verifications V, candidates D, accepted A (T tokens per step)".
inline std::string SpecSummary(const MetricsSnapshot& m) {
  return absl::StrFormat(
      "verifications %d, candidates %d, accepted %d (%.2f tokens per step)", m.spec_drafts_total,
      m.spec_draft_tokens_total, m.spec_accepted_tokens_total,
      m.spec_drafts_total == 0 ? 1.0
                               : 1.0 + static_cast<double>(m.spec_accepted_tokens_total) /
                                           static_cast<double>(m.spec_drafts_total));
}

}  // namespace banyan::scheduler::testing
