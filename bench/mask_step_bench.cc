// mask_step_bench: the engine thread's token-mask work per step with N constrained samples
// decoding at once, over a real tokenizer's vocabulary, with and without MaskWorkers.
//
//   mask_step_bench --tokenizer path/to/tokenizer.json [--samples 16] [--steps 150]
//                   [--forward_ms 5] [--workers 2] [--seed 1] [--schema FILE] [--prefetch N]
//
// --schema: this JSON Schema instead of the built-in weather tool's. --prefetch N: first, on a
// fresh masker, the time the workers take to classify the schema's first N positions ahead of
// need (MaskWorkers::Prefetch, as banyand asks once a schema is in steady use), with the walks.
//
// Each sample walks its schema (weather tool arguments), drawing uniformly among the allowed
// tokens from a generator keyed by (seed, sample, its own token count), as the sampler's Philox
// streams are. Per step, what EngineLoop does for each constrained row is timed on this
// (the engine) thread:
//   - before (--workers 0 path): FillMask, classifying positions met for the first time here;
//   - after: MaskWorkers::Request; a sample whose mask is not classified sits out the step while
//     a worker classifies it, the others FillMask from the cache.
// Between steps the thread sleeps --forward_ms (the device's forward pass, during which the
// workers run). Both runs start from a freshly compiled grammar whose start is classified (as
// ConstraintCache does), print the per-step time (median, p99, max), the steps taken, the
// sit-outs, and whether every sample drew the same tokens in both. "max CPU" is the slowest
// step's CPU time on the engine thread: below its wall time when the thread was preempted (the
// workers and the engine thread share the cores).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"
#include "scheduler/mask_workers.h"
#include "text/grammar/automaton.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/token_mask.h"
#include "text/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using banyan::text::grammar::CompiledGrammar;
using banyan::text::grammar::Matcher;
using banyan::text::grammar::TokenBits;
using banyan::text::grammar::TokenMasker;
using banyan::text::grammar::Vocabulary;

constexpr char kSchema[] =
    R"({"type":"object","properties":{"location":{"type":"string","maxLength":40},
        "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},
        "required":["location","unit"],"additionalProperties":false})";

struct Options {
  std::string tokenizer;
  int samples = 16;
  int steps = 150;
  double forward_ms = 5;
  int workers = 2;
  uint64_t seed = 1;
  std::string schema_file;
  int64_t prefetch = 0;
};

struct RunResult {
  std::vector<double> step_us;      // engine-thread mask time per step, wall
  std::vector<double> step_cpu_us;  // the same, the thread's CPU time (no preemption)
  std::vector<std::vector<int32_t>> tokens;
  int64_t sit_outs = 0;
  int steps = 0;
};

double ThreadCpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// The n-th allowed token for (seed, sample, count), n uniform.
int32_t Draw(const TokenBits& mask, int vocab, uint64_t seed, int sample, size_t count) {
  std::vector<int32_t> allowed;
  for (int32_t id = 0; id < vocab; ++id) {
    if ((mask[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
  }
  if (allowed.empty()) return -1;
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(sample) * 7919 + count);
  return allowed[rng() % allowed.size()];
}

RunResult Run(const Options& o, std::shared_ptr<const CompiledGrammar> grammar,
              std::shared_ptr<const Vocabulary> vocab, bool workers) {
  auto masker = std::make_shared<TokenMasker>(grammar, vocab);
  masker->PrepareStart();
  std::unique_ptr<banyan::scheduler::MaskWorkers> pool;
  if (workers) pool = std::make_unique<banyan::scheduler::MaskWorkers>(o.workers);
  std::vector<Matcher> matchers(o.samples, Matcher(grammar));
  std::vector<char> done(o.samples, 0);
  RunResult r;
  r.tokens.resize(o.samples);
  std::vector<TokenBits> masks(o.samples);
  for (int step = 0; step < 10 * o.steps; ++step) {
    std::vector<int> drawing;
    const Clock::time_point t0 = Clock::now();
    const double cpu0 = ThreadCpuUs();
    for (int s = 0; s < o.samples; ++s) {
      if (done[s]) continue;
      if (pool != nullptr && !pool->Request(masker, matchers[s])) {
        ++r.sit_outs;
        continue;
      }
      masker->FillMask(matchers[s], &masks[s]);
      drawing.push_back(s);
    }
    r.step_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    r.step_cpu_us.push_back(ThreadCpuUs() - cpu0);
    for (int s : drawing) {
      const int32_t id = Draw(masks[s], vocab->size(), o.seed, s, r.tokens[s].size());
      if (id < 0 || !matchers[s].Accept(vocab->bytes(id))) {
        done[s] = 1;
        continue;
      }
      r.tokens[s].push_back(id);
      if (static_cast<int>(r.tokens[s].size()) >= o.steps) done[s] = 1;
    }
    ++r.steps;
    if (std::all_of(done.begin(), done.end(), [](char d) { return d != 0; })) break;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.forward_ms));
  }
  return r;
}

void Print(const char* name, RunResult r) {
  std::vector<double>& t = r.step_us;
  std::vector<double>& c = r.step_cpu_us;
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  double total = 0;
  for (double x : t) total += x;
  std::printf("| %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.3f | %lld |\n", name, r.steps,
              t[t.size() / 2], t[std::min(t.size() - 1, t.size() * 99 / 100)], t.back(),
              c.back(), total / static_cast<double>(t.size()), total / 1e6,
              static_cast<long long>(r.sit_outs));
}

// Prefetch on a fresh masker: wall time until the workers are idle, and what they walked.
void PrintPrefetch(const Options& o, std::shared_ptr<const CompiledGrammar> grammar,
                   std::shared_ptr<const Vocabulary> vocab) {
  auto masker = std::make_shared<TokenMasker>(grammar, vocab);
  masker->PrepareStart();
  banyan::scheduler::MaskWorkers pool(o.workers);
  const Clock::time_point t0 = Clock::now();
  pool.Prefetch(masker, static_cast<size_t>(o.prefetch));
  pool.WaitIdle();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("| prefetch of %lld positions | classes | s | walks (ahead) | short walks | long walks "
              "| classes cached | positions cached |\n|---|---|---|---|---|---|---|---|\n",
              static_cast<long long>(o.prefetch));
  std::printf("| %d workers | %zu | %.2f | %lld (%lld) | %lld | %lld | %zu | %zu |\n\n", o.workers,
              masker->num_classes(), s, static_cast<long long>(pool.stats().walks),
              static_cast<long long>(pool.stats().prefetch_walks),
              static_cast<long long>(masker->walks()), static_cast<long long>(masker->long_walks()),
              masker->classified(), masker->long_classified());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    bool ok = true;
    if (flag == "--tokenizer") {
      o.tokenizer = value;
    } else if (flag == "--samples") {
      ok = absl::SimpleAtoi(value, &o.samples);
    } else if (flag == "--steps") {
      ok = absl::SimpleAtoi(value, &o.steps);
    } else if (flag == "--forward_ms") {
      ok = absl::SimpleAtod(value, &o.forward_ms);
    } else if (flag == "--workers") {
      ok = absl::SimpleAtoi(value, &o.workers);
    } else if (flag == "--seed") {
      ok = absl::SimpleAtoi(value, &o.seed);
    } else if (flag == "--schema") {
      o.schema_file = value;
    } else if (flag == "--prefetch") {
      ok = absl::SimpleAtoi(value, &o.prefetch);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad flag %s %s\n", flag.c_str(), value.c_str());
      return 1;
    }
  }
  if (o.tokenizer.empty() || o.samples < 1 || o.steps < 1) {
    std::fprintf(stderr,
                 "usage: mask_step_bench --tokenizer FILE [--samples N] [--steps N] "
                 "[--forward_ms MS] [--workers N] [--seed N]\n");
    return 1;
  }
  auto tok = banyan::text::Tokenizer::FromFile(o.tokenizer);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> bytes((*tok)->vocab_size());
  for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) bytes[id] = (*tok)->TokenBytes(id);
  for (const auto& [text, id] : (*tok)->SpecialTokens()) {
    if (id >= 0 && id < static_cast<int32_t>(bytes.size())) bytes[id].clear();
  }
  auto vocab = std::make_shared<const Vocabulary>(std::move(bytes));
  std::string schema = kSchema;
  if (!o.schema_file.empty()) {
    std::ifstream in(o.schema_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", o.schema_file.c_str());
      return 1;
    }
    schema = text.str();
  }
  auto grammar = banyan::text::grammar::JsonSchemaToGrammar(nlohmann::ordered_json::parse(schema));
  if (!grammar.ok()) {
    std::fprintf(stderr, "%s\n", std::string(grammar.status().message()).c_str());
    return 1;
  }
  auto compiled = CompiledGrammar::Compile(*grammar, {});
  if (!compiled.ok()) return 1;
  auto g = std::make_shared<const CompiledGrammar>(*std::move(compiled));
  std::printf("vocabulary: %d tokens; %d samples, up to %d tokens each, %.1f ms per forward, "
              "%d workers\n\n",
              vocab->size(), o.samples, o.steps, o.forward_ms, o.workers);
  if (o.prefetch > 0) PrintPrefetch(o, g, vocab);
  std::printf("| masks | steps | median µs | p99 µs | max µs | max CPU µs | mean µs | total s |"
              " sit-outs |\n|---|---|---|---|---|---|---|---|---|\n");
  const RunResult before = Run(o, g, vocab, /*workers=*/false);
  const RunResult after = Run(o, g, vocab, /*workers=*/true);
  Print("engine thread classifies", before);
  Print("workers classify", after);
  std::printf("\nsame tokens for every sample: %s\n", before.tokens == after.tokens ? "yes" : "NO");
  return before.tokens == after.tokens ? 0 : 2;
}
