// The grammar engine as a filter for tests/oracle/grammar_oracle.mjs, which checks it against
// ajv (an independent JSON Schema validator).
//
// stdin: one JSON object a line,
//   {"schema": <schema>, "instances": ["<raw text>", ...], "samples": N, "seed": S}
// stdout: one JSON object a line, in the same order,
//   {"compiled": true, "accepted": [bool, ...], "samples": ["<text>", ...], "stuck": K,
//    "compile_us": T, "states": S}   (T: schema to automaton and its classes of positions)
//   {"compiled": false, "error": "<the compiler's message>"}
// An instance is accepted when the automaton takes all its bytes and may end there. A sample is
// a random walk over a small vocabulary (single bytes and multi-byte JSON-ish tokens), each
// step choosing among the tokens the token mask allows, until the matcher may end and a coin
// says stop. A walk that reaches the step cap is dropped (counted in "stuck"); a walk that finds
// no allowed token before it may end is a dead state of the automaton, reported as an error.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "text/grammar/automaton.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/matcher.h"
#include "text/grammar/token_mask.h"

namespace banyan::text::grammar {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxSteps = 3000;  // tokens per sample before the walk is dropped

std::vector<std::string> OracleVocabulary() {
  std::vector<std::string> tokens;
  // Every byte but the controls, so a walk can spell any string an enum holds.
  for (int c = 0x20; c < 0x100; ++c) {
    if (c != 0x7F) tokens.emplace_back(1, static_cast<char>(c));
  }
  tokens.emplace_back("\t");
  tokens.emplace_back("\n");
  for (const char* t :
       {"\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "{\"", "\":", "\": ", "\",", "\", \"",
        "\"}", "\"]", "[{", "}]", "},", "]}", "[]", "{}", "true", "false", "null", "0.", "-1",
        "e+", "E-", "12", "\\n", "\\\"", "\\u00e9", "\\ud83d\\ude00", "\\ud83d", "\\ude00", "T",
        ":00", "-0", "2024-", "Z\"", "ab", " \"", "\n  "}) {
    tokens.emplace_back(t);
  }
  return tokens;
}

// Structural tokens are drawn far more often than others, so strings, numbers and whitespace
// stay short and most walks end well before the cap.
bool Structural(std::string_view token) {
  for (char c : token) {
    if (std::string_view("\"{}[],:").find(c) == std::string_view::npos) return false;
  }
  return true;
}

// One random walk; returns false when it reached kMaxSteps. Sets *dead when the automaton
// allowed no token before it could end.
bool Sample(const std::shared_ptr<const CompiledGrammar>& grammar, TokenMasker* masker,
            std::mt19937_64* rng, std::string* out, bool* dead) {
  const Vocabulary& vocab = masker->vocab();
  Matcher matcher(grammar);
  TokenBits mask((vocab.size() + 63) / 64);
  out->clear();
  for (int step = 0; step < kMaxSteps; ++step) {
    if (matcher.CanEnd() && std::bernoulli_distribution(0.5)(*rng)) return true;
    std::fill(mask.begin(), mask.end(), 0);
    masker->FillMask(matcher, &mask);
    std::vector<int32_t> ids;
    std::vector<double> weights;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (!TestBit(mask, id)) continue;
      ids.push_back(id);
      weights.push_back(Structural(vocab.bytes(id)) ? 30.0 : 1.0);
    }
    if (ids.empty()) {
      if (matcher.CanEnd()) return true;
      *dead = true;
      return true;
    }
    const int32_t id = ids[std::discrete_distribution<size_t>(weights.begin(), weights.end())(*rng)];
    if (!matcher.Accept(vocab.bytes(id))) {
      // The mask allowed a token the matcher refuses: as broken as a dead state.
      *dead = true;
      return true;
    }
    out->append(vocab.bytes(id));
  }
  return false;
}

ojson Handle(const ojson& request, const std::shared_ptr<const Vocabulary>& vocab) {
  ojson reply = ojson::object();
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(request.at("schema"));
  if (!g.ok()) {
    reply["compiled"] = false;
    reply["error"] = std::string(g.status().message());
    return reply;
  }
  absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(*g);
  if (!c.ok()) {
    reply["compiled"] = false;
    reply["error"] = std::string(c.status().message());
    return reply;
  }
  auto grammar = std::make_shared<const CompiledGrammar>(*std::move(c));
  reply["compiled"] = true;
  // What a request's first compile costs before its masks: schema -> grammar -> automaton, and
  // the classes of positions a masker computes over a 16-byte horizon (a real vocabulary's).
  size_t classes = 0;
  BoundedClasses(*grammar, 16, &classes);
  reply["compile_us"] =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  reply["states"] = grammar->total_states();
  ojson accepted = ojson::array();
  if (request.contains("instances")) {
    for (const ojson& instance : request.at("instances")) {
      Matcher m(grammar);
      accepted.push_back(m.Accept(instance.get<std::string>()) && m.CanEnd());
    }
  }
  reply["accepted"] = std::move(accepted);
  const int samples = request.value("samples", 0);
  if (samples > 0) {
    std::mt19937_64 rng(request.value("seed", uint64_t{1}));
    TokenMasker masker(grammar, vocab);
    ojson texts = ojson::array();
    int stuck = 0;
    for (int i = 0; i < samples; ++i) {
      std::string text;
      bool dead = false;
      if (!Sample(grammar, &masker, &rng, &text, &dead)) {
        ++stuck;
        continue;
      }
      if (dead) {
        reply["error"] = "the automaton allowed no token after: " + text;
        break;
      }
      texts.push_back(text);
    }
    reply["samples"] = std::move(texts);
    reply["stuck"] = stuck;
  }
  return reply;
}

}  // namespace
}  // namespace banyan::text::grammar

int main() {
  using banyan::text::grammar::ojson;
  const auto vocab = std::make_shared<const banyan::text::grammar::Vocabulary>(
      banyan::text::grammar::OracleVocabulary());
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    ojson reply;
    try {
      reply = banyan::text::grammar::Handle(ojson::parse(line), vocab);
    } catch (const ojson::exception& e) {
      std::fprintf(stderr, "grammar_oracle_cli: bad request line: %s\n", e.what());
      return 2;
    }
    // Samples hold arbitrary bytes the grammar allowed; replace keeps the line printable and a
    // replaced byte then fails ajv's check loudly instead of crashing here.
    std::cout << reply.dump(-1, ' ', false, ojson::error_handler_t::replace) << '\n';
    std::cout.flush();
  }
  return 0;
}
