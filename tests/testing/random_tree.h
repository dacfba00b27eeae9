// Builds random prefix trees with hierarchical sharing: a global prefix, per-group prefixes,
// optional forks, and private tails of random lengths (not multiples of the chunk size).
#pragma once

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kvcache/prefix_tree.h"

namespace banyan::testing {

struct RandomTreeSpec {
  int num_groups = 3;
  int rows_per_group_max = 4;
  int global_prefix_min = 0;
  int global_prefix_max = 150;
  int group_prefix_max = 80;
  int tail_max = 40;
  int vocab = 1000;
};

// Inserts the sequences into `tree`, returns their ids (in insertion order). Also exercises
// Fork and Append so that the tree holds splits and in-place growth.
inline std::vector<kvcache::SeqId> BuildRandomTree(kvcache::PrefixTree& tree, std::mt19937_64& rng,
                                                   const RandomTreeSpec& spec) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = uni(0, spec.vocab - 1);
    return t;
  };
  std::vector<kvcache::SeqId> seqs;
  std::vector<int32_t> global = tokens(uni(spec.global_prefix_min, spec.global_prefix_max));
  for (int gi = 0; gi < spec.num_groups; ++gi) {
    std::vector<int32_t> group = global;
    auto gp = tokens(uni(0, spec.group_prefix_max));
    group.insert(group.end(), gp.begin(), gp.end());
    int rows = uni(1, spec.rows_per_group_max);
    for (int r = 0; r < rows; ++r) {
      std::vector<int32_t> seq = group;
      auto tail = tokens(uni(seq.empty() ? 1 : 0, spec.tail_max));
      seq.insert(seq.end(), tail.begin(), tail.end());
      auto placed = tree.Insert("", seq);
      EXPECT_TRUE(placed.ok()) << placed.status();
      if (!placed.ok()) return seqs;
      kvcache::SeqId id = placed->seq;
      if (uni(0, 3) == 0) {  // n-way sampling: fork, then each fork decodes its own tokens
        auto forks = tree.Fork(id, uni(2, 3));
        EXPECT_TRUE(forks.ok());
        for (kvcache::SeqId f : *forks) {
          int steps = uni(0, 20);
          for (int s = 0; s < steps; ++s) EXPECT_TRUE(tree.Append(f, uni(0, spec.vocab - 1)).ok());
          seqs.push_back(f);
        }
      } else {
        seqs.push_back(id);
      }
    }
  }
  return seqs;
}

}  // namespace banyan::testing
