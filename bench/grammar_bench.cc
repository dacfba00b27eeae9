// grammar_bench: what structured outputs cost on the host, over a real tokenizer's vocabulary.
//
//   grammar_bench --tokenizer path/to/tokenizer.json [--walks 20] [--steps 200] [--seed 1]
//                 [--schema FILE]...   (these schemas instead of the built-in set)
//
// For each schema of a small realistic set (tool-call arguments, a nested record, any JSON
// object), it reports the compile time (schema -> grammar -> automaton), the time of the first
// mask (cold: each automaton position met is classified over the whole vocabulary once), and
// the per-token mask time over random walks once the cache is warm (median and p99), with the
// cache's size. Walks draw uniformly among the allowed tokens: a junk model, the worst case for
// how far a walk strays. Results go to docs/structured_outputs.md with the command and commit.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "text/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "text/grammar/automaton.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/token_mask.h"

namespace {

using Clock = std::chrono::steady_clock;
using banyan::text::grammar::CompiledGrammar;
using banyan::text::grammar::Matcher;
using banyan::text::grammar::TokenBits;
using banyan::text::grammar::TokenMasker;
using banyan::text::grammar::Vocabulary;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct NamedSchema {
  const char* name;
  const char* schema;
};

const NamedSchema kSchemas[] = {
    {"weather_tool",
     R"({"type":"object","properties":{"location":{"type":"string"},
         "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},
         "required":["location","unit"],"additionalProperties":false})"},
    {"calendar_event",
     R"({"type":"object","properties":{"title":{"type":"string","maxLength":80},
         "start":{"type":"string","format":"date-time"},
         "attendees":{"type":"array","items":{"type":"object","properties":{
           "email":{"type":"string"},"optional":{"type":"boolean"}},"required":["email"]},
           "maxItems":8},
         "location":{"anyOf":[{"type":"string"},{"type":"null"}]}},
         "required":["title","start","attendees"]})"},
    {"tree_defs",
     R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
         "name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"},
         "maxItems":3}},"required":["name"]}}})"},
    {"json_object", R"({"type":"object"})"},
};

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path;
  int walks = 20, steps = 200;
  uint64_t seed = 1;
  std::deque<std::string> own_names, own_texts;  // --schema files (stable addresses)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--tokenizer") {
      tokenizer_path = value;
    } else if (flag == "--walks") {
      walks = std::stoi(value);
    } else if (flag == "--steps") {
      steps = std::stoi(value);
    } else if (flag == "--seed") {
      seed = std::stoull(value);
    } else if (flag == "--schema") {
      std::ifstream in(value);
      std::stringstream text;
      text << in.rdbuf();
      if (!in) {
        std::fprintf(stderr, "cannot read %s\n", value.c_str());
        return 2;
      }
      own_names.push_back(value.substr(value.find_last_of('/') + 1));
      own_texts.push_back(text.str());
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (tokenizer_path.empty()) {
    std::fprintf(stderr, "usage: grammar_bench --tokenizer FILE [--walks N] [--steps N]\n");
    return 2;
  }
  auto tok = banyan::text::Tokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> bytes((*tok)->vocab_size());
  int specials = 0;
  {
    std::vector<char> special(bytes.size(), 0);
    for (const auto& [text, id] : (*tok)->SpecialTokens()) {
      if (id >= 0 && id < static_cast<int32_t>(special.size())) special[id] = 1;
    }
    for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) {
      if (special[id]) {
        ++specials;
        continue;
      }
      bytes[id] = (*tok)->TokenBytes(id);
    }
  }
  const Clock::time_point v0 = Clock::now();
  auto vocab = std::make_shared<const Vocabulary>(std::move(bytes));
  std::printf("vocabulary: %s, %d tokens (%d special), sorted in %.1f ms\n",
              (*tok)->Describe().c_str(), vocab->size(), specials, Us(Clock::now() - v0) / 1e3);
  std::vector<NamedSchema> schemas(std::begin(kSchemas), std::end(kSchemas));
  if (!own_texts.empty()) {
    schemas.clear();
    for (size_t i = 0; i < own_texts.size(); ++i) {
      schemas.push_back({own_names[i].c_str(), own_texts[i].c_str()});
    }
  }
  std::printf("| schema | DFA states | classes | compile us | masker us | first mask ms | mask us median |"
              " p99 | max | classes cached | positions cached | tokens/walk |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(seed);
  for (const NamedSchema& s : schemas) {
    const Clock::time_point c0 = Clock::now();
    auto grammar = banyan::text::grammar::JsonSchemaToGrammar(
        nlohmann::ordered_json::parse(s.schema));
    if (!grammar.ok()) {
      std::fprintf(stderr, "%s: %s\n", s.name, std::string(grammar.status().message()).c_str());
      return 1;
    }
    auto compiled = CompiledGrammar::Compile(*grammar);
    if (!compiled.ok()) {
      std::fprintf(stderr, "%s: %s\n", s.name, std::string(compiled.status().message()).c_str());
      return 1;
    }
    const double compile_us = Us(Clock::now() - c0);
    auto g = std::make_shared<const CompiledGrammar>(*std::move(compiled));
    const Clock::time_point k0 = Clock::now();
    TokenMasker masker(g, vocab);
    const double masker_us = Us(Clock::now() - k0);
    TokenBits mask;
    double first_ms = 0;
    {
      Matcher m(g);
      const Clock::time_point f0 = Clock::now();
      masker.FillMask(m, &mask);
      first_ms = Us(Clock::now() - f0) / 1e3;
    }
    // Warm-up walks fill the cache; timed walks follow the same distribution.
    std::vector<double> times;
    int64_t tokens = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (int w = 0; w < walks; ++w) {
        Matcher m(g);
        for (int step = 0; step < steps; ++step) {
          const Clock::time_point t0 = Clock::now();
          masker.FillMask(m, &mask);
          if (pass == 1) times.push_back(Us(Clock::now() - t0));
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < vocab->size(); ++id) {
            if (banyan::text::grammar::TestBit(mask, id)) allowed.push_back(id);
          }
          if (allowed.empty() || (m.CanEnd() && rng() % 8 == 0)) break;
          m.Accept(vocab->bytes(allowed[rng() % allowed.size()]));
          if (pass == 1) ++tokens;
        }
      }
    }
    std::sort(times.begin(), times.end());
    auto pct = [&](double p) {
      return times.empty() ? 0.0 : times[std::min(times.size() - 1, size_t(p * times.size()))];
    };
    std::printf("| %s | %lld | %zu | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %zu | %zu | %.1f |\n",
                s.name, static_cast<long long>(g->total_states()), masker.num_classes(), compile_us,
                masker_us, first_ms, pct(0.5),
                pct(0.99), times.empty() ? 0.0 : times.back(), masker.classified(),
                masker.long_classified(),
                walks > 0 ? double(tokens) / walks : 0.0);
  }
  return 0;
}
