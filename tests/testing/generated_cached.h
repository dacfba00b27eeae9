// A check shared by the engine-loop tests: once a loop is done, its prefix tree still holds what
// each single-sample request placed: the prompt and every generated token but the last (a
// sample that ends at collection places no more). Nothing may be evicted meanwhile (a cache
// larger than the run). With fed steps this proves every pending token was set to the token
// sampled for it: a pending one matches nothing.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/engine_loop.h"
#include "scheduler/generate.h"

namespace banyan::testing {

inline void ExpectGeneratedCached(const scheduler::EngineLoop& loop,
                                  std::span<const scheduler::Request> reqs,
                                  std::span<const scheduler::GenerationResult> results,
                                  const std::string& label) {
  ASSERT_EQ(reqs.size(), results.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].n != 1) continue;
    std::vector<int32_t> all = reqs[i].prompt;
    const std::vector<int32_t>& gen = results[i].samples[0].tokens;
    all.insert(all.end(), gen.begin(), gen.end());
    if (!gen.empty()) all.pop_back();
    EXPECT_EQ(loop.tree().Match(reqs[i].cache_namespace, all),
              static_cast<int32_t>(all.size()))
        << label << " request " << i;
  }
}

}  // namespace banyan::testing
