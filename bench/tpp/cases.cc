#include "bench/tpp/cases.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "bench/physical_limit.h"

namespace banyan::bench {
namespace {

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 1000000);
  return t;
}

}  // namespace

std::string TppCase::Id() const {
  return name + "_b" + std::to_string(batch) + "_p" + std::to_string(shared);
}

std::string TppCase::SharedDesc() const {
  std::string s = std::to_string(shared);
  for (const TppLevel& l : levels) {
    s += '+';  // (appended piece by piece: GCC 12 warns about "+" + std::string, -Wrestrict)
    s += std::to_string(l.groups);
    s += 'x';
    s += std::to_string(l.tokens);
  }
  return s;
}

std::string TppCase::PrivateDesc() const {
  std::string s = std::to_string(tail_min > 0 ? tail_min : priv);
  if (tail_min > 0) {
    s += "..";
    s += std::to_string(priv);
  }
  return s;
}

std::vector<TppCase> TppCases() {
  std::vector<TppCase> cs;
  // PERFORMANCE.md section 1.
  for (int p : {1024, 2048, 4096}) cs.push_back({"chunkattn_table", 32, 32, 32, 128, p, 1, true});
  for (int b : {64, 256, 1024}) cs.push_back({"hydragen_fig5", b, 8, 1, 128, 32768, 1, true});
  cs.push_back({"hydragen_fig5_suffix256", 256, 8, 1, 128, 32768, 256, true});
  cs.push_back({"llama7b_b256_p16k_s128", 256, 32, 32, 128, 16384, 128, true});
  // No sharing, one per shape (the largest context of the shape): tpp must equal paged.
  cs.push_back({"noshare_chunkattn", 32, 32, 32, 128, 4096, 1, false});
  cs.push_back({"noshare_hydragen", 64, 8, 1, 128, 32768, 1, false});
  cs.push_back({"noshare_hydragen", 256, 8, 1, 128, 32768, 256, false});
  cs.push_back({"noshare_hydragen", 1024, 8, 1, 128, 32768, 1, false});
  cs.push_back({"noshare_llama7b", 256, 32, 32, 128, 16384, 128, false});
  // One sequence, or a few, alone (a single user's chat): nothing shared, few CTAs unless the
  // context is split.
  for (int p : {2048, 16384}) cs.push_back({"single_llama7b", 1, 32, 32, 128, p, 1, false});
  cs.push_back({"single_llama3_8b", 1, 32, 8, 128, 8192, 1, false});
  cs.push_back({"few_llama7b", 4, 32, 32, 128, 4096, 1, false});
  // Hierarchical: a global prefix, 16 group prefixes, private tails of 32..256 tokens (GQA 4).
  cs.push_back({"hierarchical", 256, 32, 8, 128, 4096, 256, true, {{16, 1024}}, 32});
  // Issue 15, the regimes end-to-end serving hits (one layer of each model's attention).
  // The 7B shape (MHA, 32 heads of 128) at B = 1,024 with a 2K / 16K prefix: each row's tail as
  // at the first decode step (1 token), as after 64 steps (64), and spread over 1..64 as with
  // staggered rows.
  for (int p : {2048, 16384}) {
    cs.push_back({"mha7b_tail1", 1024, 32, 32, 128, p, 1, true});
    cs.push_back({"mha7b_tail64", 1024, 32, 32, 128, p, 64, true});
    cs.push_back({"mha7b_tail1to64", 1024, 32, 32, 128, p, 64, true, {}, 1});
  }
  // Llama-3-8B's heads (32 q / 8 kv of 128) at B = 256 / 1,024, tails 1..64.
  for (int b : {256, 1024}) {
    for (int p : {2048, 16384}) {
      cs.push_back({"llama3_8b_tail1to64", b, 32, 8, 128, p, 64, true, {}, 1});
    }
  }
  // A 64-row, 4-level tree (branching 4 x 4 x 2 x 2, Llama-3-8B heads): a 2,048-token prefix
  // shared by all 64 rows, 4 prefixes of 1,024 (16 rows each), 16 of 512 (4 rows each), 32 of
  // 256 (2 rows each), then each row's own tail of 1..64 tokens. Every level's lengths are whole
  // chunks, so each level is its own phase-1 segment.
  cs.push_back({"tree_4x4x2x2", 64, 32, 8, 128, 2048, 64, true,
                {{4, 1024}, {16, 512}, {32, 256}}, 1});
  // Small shared cases around ChunkAttention's, for the phase-1 split model (`--only split_fit
  // --sweep` times every forced split count): MHA at B = 16 / 64 / 128, Llama-3-8B's heads at
  // B = 32, 1K and 4K prefixes, and MHA B = 32 at 8K.
  for (int p : {1024, 4096}) {
    for (int b : {16, 64, 128}) cs.push_back({"split_fit_mha", b, 32, 32, 128, p, 1, true});
    cs.push_back({"split_fit_gqa4", 32, 32, 8, 128, p, 1, true});
  }
  cs.push_back({"split_fit_mha", 32, 32, 32, 128, 8192, 1, true});
  return cs;
}

int64_t TppPoolChunks(const TppCase& c) {
  const int64_t per_row = (c.share ? 0 : c.shared) + c.priv;
  int64_t chunks = (c.shared + kTppBenchChunk - 1) / kTppBenchChunk + 1 +
                   c.batch * ((per_row + kTppBenchChunk - 1) / kTppBenchChunk + 1);
  if (c.levels.empty()) chunks += 2;  // (what the single-level sizing gave a case without groups)
  for (const TppLevel& l : c.levels) {
    chunks += static_cast<int64_t>(l.groups) * (l.tokens / kTppBenchChunk + 2);
  }
  return chunks;
}

std::vector<kvcache::SeqId> BuildTppTree(kvcache::PrefixTree& tree, const TppCase& c,
                                         std::mt19937_64& rng) {
  std::vector<int32_t> global = RandomTokens(rng, c.share ? c.shared : 0);
  // prefixes[level][group]; each group's first token differs from its siblings' by construction.
  std::vector<std::vector<std::vector<int32_t>>> prefixes(c.levels.size());
  for (size_t l = 0; l < c.levels.size(); ++l) {
    for (int g = 0; g < c.levels[l].groups; ++g) {
      prefixes[l].push_back(RandomTokens(rng, c.levels[l].tokens));
      if (!prefixes[l].back().empty()) {
        prefixes[l].back()[0] = 4000000 + static_cast<int32_t>(l) * 65536 + g;
      }
    }
  }
  for (int r = 0; r < c.batch; ++r) {
    std::vector<int32_t> seq = global;
    if (!c.share) {
      seq = RandomTokens(rng, c.shared);  // the same context length, nothing shared
      seq[0] = 2000000 + r;
    }
    for (size_t l = 0; l < c.levels.size(); ++l) {
      const auto& g = prefixes[l][static_cast<size_t>(r) * c.levels[l].groups / c.batch];
      seq.insert(seq.end(), g.begin(), g.end());
    }
    const int tail =
        c.tail_min > 0 ? static_cast<int>(c.tail_min + rng() % (c.priv - c.tail_min + 1)) : c.priv;
    std::vector<int32_t> t = RandomTokens(rng, tail);
    if (!t.empty()) t[0] = 3000000 + r;  // private from its first token
    seq.insert(seq.end(), t.begin(), t.end());
    auto placed = tree.Insert("", seq);
    if (!placed.ok()) {
      std::fprintf(stderr, "%s: insert: %s\n", c.Id().c_str(),
                   std::string(placed.status().message()).c_str());
      std::exit(1);
    }
  }
  return tree.DfsOrder();
}

TppFloor TppCaseFloor(const TppCase& c, const kvcache::AttentionPlan& shared_plan, bool kv_fp8) {
  TppFloor f;
  // K and V, 2 bytes each; FP8: a code each and one exponent per row
  const double kv_token_bytes = kv_fp8 ? 2.0 * c.hkv * (c.d + 1) : 4.0 * c.hkv * c.d;
  f.bytes = static_cast<double>(shared_plan.shared_tokens() + shared_plan.private_tokens()) *
            kv_token_bytes;
  double context = 0;
  for (int32_t len : shared_plan.row_length) context += len;
  f.flops = 4.0 * c.hq * c.d * context;
  f.us = AttentionFloorSeconds(f.bytes, f.flops) * 1e6;
  return f;
}

}  // namespace banyan::bench
