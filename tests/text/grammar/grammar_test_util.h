// Helpers shared by the grammar engine's tests.
#pragma once

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "text/grammar/automaton.h"
#include "text/grammar/matcher.h"

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

}  // namespace banyan::text::grammar
