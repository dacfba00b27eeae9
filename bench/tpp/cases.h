// The TPP microbenchmark's cases (bench/tpp/tpp_bench.cc), their prefix trees and their floors:
// the CPU side of the benchmark, so that tests/bench/tpp_cases_test.cc and `tpp_bench --dry-run`
// check them without a GPU.
//
// A case is a batch of rows over one KV layer: a global prefix of `shared` tokens (none when
// !share: every row then has its own `shared` tokens), then, level by level, a group prefix shared
// by the rows of its group (row r is in group r * groups / batch of a level), then a private tail
// of `priv` tokens (tail_min > 0: drawn uniformly from [tail_min, priv] per row). Every row's tail
// is private from its first token, so even a 1-token tail (the token being decoded, the least a
// decode row holds) is a private span.
//
// Floor = max(bytes at kCopyBytesPerSecond, FLOPs at kTensorFlopsPerSecond)
// (bench/physical_limit.h), bytes = the shared plan's segments once + every row's private tokens,
// K and V of 2 bytes each, FLOPs = 4 x q_heads x head_dim x every row's whole context.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvcache/attention_plan.h"
#include "kvcache/prefix_tree.h"

namespace banyan::bench {

inline constexpr int kTppBenchChunk = 64;  // tokens per KV chunk

struct TppLevel {
  int groups = 0;  // group prefixes at this level (a divisor of the batch)
  int tokens = 0;  // tokens of each
};

struct TppCase {
  std::string name;
  int batch, hq, hkv, d;
  int shared;    // tokens shared by all rows (global prefix)
  int priv;      // private tokens per row (with tail_min > 0: the maximum of a random tail)
  bool share;    // false: the no-sharing case (every row its own context of shared + priv)
  std::vector<TppLevel> levels = {};  // group prefixes under the global one, outermost first
  int tail_min = 0;                   // > 0: tails drawn from [tail_min, priv]

  std::string Id() const;           // name_b<batch>_p<shared>, what --only matches
  std::string SharedDesc() const;   // "2048", or "2048+4x1024+16x512" with levels
  std::string PrivateDesc() const;  // "64", or "1..64" for random tails
};

struct TppFloor {
  double bytes = 0;  // KV read once: shared segments + private spans
  double flops = 0;  // QK^T and PV over every row's context
  double us = 0;     // the floor
};

// Every case, in the order tpp_bench runs them.
std::vector<TppCase> TppCases();

// Chunks a pool needs for the case's tree (with slack for partial chunks).
int64_t TppPoolChunks(const TppCase& c);

// Inserts the case's rows into `tree` (rng seeded by the caller); returns them in DFS order.
std::vector<kvcache::SeqId> BuildTppTree(kvcache::PrefixTree& tree, const TppCase& c,
                                         std::mt19937_64& rng);

// kv_fp8: an FP8 cache's bytes (kernels/kv_fp8.h: head_dim + 1 bytes per K or V row).
TppFloor TppCaseFloor(const TppCase& c, const kvcache::AttentionPlan& shared_plan,
                      bool kv_fp8 = false);

}  // namespace banyan::bench
