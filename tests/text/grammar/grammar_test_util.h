// Helpers shared by the grammar engine's tests.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "text/grammar/automaton.h"
#include "text/grammar/matcher.h"
#include "text/grammar/token_mask.h"

namespace banyan::text::grammar {

// The compiled grammar, or null with a test failure that shows the status.
inline std::shared_ptr<const CompiledGrammar> MustCompile(const Grammar& g) {
  absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(g);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  return std::make_shared<const CompiledGrammar>(*std::move(c));
}

// Whether the whole of `text` is in the grammar's language.
inline bool Matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Matcher m(g);
  return m.Accept(text) && m.CanEnd();
}

// A token id that `mask` allows, drawn uniformly; -1 when it allows none.
inline int32_t RandomAllowed(const TokenBits& mask, int32_t vocab_size, std::mt19937_64& rng) {
  std::vector<int32_t> allowed;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (TestBit(mask, id)) allowed.push_back(id);
  }
  return allowed.empty() ? -1 : allowed[rng() % allowed.size()];
}

}  // namespace banyan::text::grammar
