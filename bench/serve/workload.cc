#include "bench/serve/workload.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace banyan::bench::serve {
namespace {

class TokenSource {
 public:
  TokenSource(const Options& o) : rng_(o.seed), dist_(o.min_token, o.vocab - 1) {}

  std::vector<int32_t> Draw(int count) {
    std::vector<int32_t> v(static_cast<size_t>(count));
    for (int32_t& t : v) t = dist_(rng_);
    return v;
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
  std::uniform_int_distribution<int32_t> dist_;
};

std::vector<int32_t> Concat(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> v;
  v.reserve(a.size() + b.size());
  v.insert(v.end(), a.begin(), a.end());
  v.insert(v.end(), b.begin(), b.end());
  return v;
}

struct Defaults {
  int num_prompts = 0;
  int prefix = 0;
  int suffix = 0;
  int output = 0;
  int groups = 1;
  int per_group = 1;
  int n = 1;
};

bool DefaultsFor(const std::string& name, Defaults* d) {
  if (name == "generated-shared-prefix") {
    *d = {64 * 16, 2048, 128, 256, 64, 16, 1};
  } else if (name == "prefix-repetition") {
    *d = {1000, 256, 256, 128, 10, 100, 1};
  } else if (name == "multi-tenant") {
    *d = {8 * 16, 0, 128, 128, 8, 16, 1};
  } else if (name == "long-document") {
    *d = {64, 16384, 32, 64, 1, 64, 1};
  } else if (name == "n-way") {
    *d = {16, 1024, 0, 256, 16, 1, 16};
  } else if (name == "no-sharing") {
    *d = {1000, 0, 1024, 128, 1000, 1, 1};
  } else if (name == "shared-prefix") {
    *d = {256, 1024, 64, 128, 1, 256, 1};
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::string BuildWorkload(const Options& o, Workload* out) {
  Defaults d;
  if (!DefaultsFor(o.workload, &d)) {
    return "unknown --workload '" + o.workload +
           "' (generated-shared-prefix, prefix-repetition, multi-tenant, long-document, n-way, "
           "no-sharing, shared-prefix)";
  }
  Workload w;
  w.name = o.workload;
  w.prefix_tokens = o.prefix_tokens.value_or(d.prefix);
  w.suffix_tokens = o.suffix_tokens.value_or(d.suffix);
  w.output_tokens = o.output_tokens.value_or(d.output);
  w.num_groups = o.num_groups.value_or(d.groups);
  w.prompts_per_group = o.prompts_per_group.value_or(d.per_group);
  w.n = o.n.value_or(d.n);
  // Workloads made of groups take their size from the groups unless --num-prompts is given.
  const bool grouped = w.name == "generated-shared-prefix" || w.name == "multi-tenant";
  w.num_prompts = o.num_prompts.value_or(grouped && (o.num_groups || o.prompts_per_group)
                                             ? w.num_groups * w.prompts_per_group
                                             : d.num_prompts);
  TokenSource src(o);
  std::mt19937_64& rng = src.rng();
  auto add = [&](std::vector<int32_t> prompt, std::string user = "") {
    RequestSpec r;
    r.prompt = std::move(prompt);
    r.output_tokens = w.output_tokens;
    r.n = w.n;
    r.user = std::move(user);
    w.requests.push_back(std::move(r));
  };
  std::vector<std::vector<int32_t>> suffix_pool;  // drawn at the first use, after shared parts
  // Private suffixes are distinct: with short ones (one token, as the served-vs-engine runs
  // use) random draws would collide, and two requests with the same prompt share their whole
  // sequence in the prefix tree, which is not what a "private" suffix means here.
  std::set<std::vector<int32_t>> drawn;
  auto fresh = [&]() {
    std::vector<int32_t> s = src.Draw(w.suffix_tokens);
    for (int tries = 0; tries < 64 && !drawn.insert(s).second; ++tries) {
      s = src.Draw(w.suffix_tokens);
    }
    return s;
  };
  auto suffix = [&]() {
    if (o.suffix_pool <= 0) return fresh();
    if (suffix_pool.empty()) {
      for (int k = 0; k < o.suffix_pool; ++k) suffix_pool.push_back(src.Draw(w.suffix_tokens));
    }
    std::uniform_int_distribution<int> pick(0, o.suffix_pool - 1);
    return suffix_pool[static_cast<size_t>(pick(rng))];
  };
  if (o.suffix_pool > 0 && (w.name == "n-way" || w.name == "no-sharing")) {
    return "--suffix-pool: the " + w.name + " workload has no private suffix to repeat";
  }

  if (w.name == "generated-shared-prefix" || w.name == "multi-tenant") {
    // Group g serves prompts g, g + G, g + 2G, ... so --num-prompts cuts evenly across groups.
    const bool tenants = w.name == "multi-tenant";
    std::uniform_int_distribution<int> len(o.min_prefix_tokens, o.max_prefix_tokens);
    std::vector<std::vector<int32_t>> systems;
    for (int g = 0; g < w.num_groups; ++g) {
      const int plen = tenants && !o.prefix_tokens ? len(rng) : w.prefix_tokens;
      systems.push_back(src.Draw(plen));
    }
    for (int i = 0; i < w.num_prompts; ++i) {
      const int g = i % w.num_groups;
      add(Concat(systems[g], suffix()),
          tenants ? "tenant-" + std::to_string(g) : "");
    }
    std::shuffle(w.requests.begin(), w.requests.end(), rng);
    if (!tenants) w.prefix_tokens = systems.empty() ? 0 : static_cast<int>(systems[0].size());
  } else if (w.name == "prefix-repetition") {
    std::vector<std::vector<int32_t>> prefixes;
    for (int g = 0; g < w.num_groups; ++g) prefixes.push_back(src.Draw(w.prefix_tokens));
    std::uniform_int_distribution<int> pick(0, w.num_groups - 1);
    w.prompts_per_group = w.num_prompts / w.num_groups;  // on average
    for (int i = 0; i < w.num_prompts; ++i) {
      const int g = pick(rng);
      add(Concat(prefixes[g], suffix()));
    }
  } else if (w.name == "long-document" || w.name == "shared-prefix") {
    w.num_groups = 1;
    w.prompts_per_group = w.num_prompts;
    const std::vector<int32_t> shared = src.Draw(w.prefix_tokens);
    for (int i = 0; i < w.num_prompts; ++i) add(Concat(shared, suffix()));
  } else if (w.name == "n-way" || w.name == "no-sharing") {
    w.num_groups = w.num_prompts;
    w.prompts_per_group = 1;
    for (int i = 0; i < w.num_prompts; ++i) add(src.Draw(w.prefix_tokens + w.suffix_tokens));
  }
  for (const RequestSpec& r : w.requests) {
    if (r.prompt.empty()) return "the workload's prompts are empty: give --prefix/--suffix-tokens";
  }
  if (o.min_output_tokens > 0) {
    // Staggered ends, as outputs of their own lengths have them; from a generator of their own,
    // so the prompts are those of the same seed without the flag.
    if (o.min_output_tokens > w.output_tokens) {
      return "--min-output-tokens must not exceed --output-tokens";
    }
    std::mt19937_64 lengths(o.seed * 0x9E3779B97F4A7C15ull + 17);
    std::uniform_int_distribution<int> pick(o.min_output_tokens, w.output_tokens);
    for (RequestSpec& r : w.requests) r.output_tokens = pick(lengths);
  }
  // Evenly spread: request i is penalised when i * share crosses an integer.
  if (o.frequency_penalty != 0.0 || o.logit_bias_tokens > 0 || o.min_tokens > 0) {
    for (size_t i = 0; i < w.requests.size(); ++i) {
      w.requests[i].penalised = std::floor(static_cast<double>(i + 1) * o.penalised_share) >
                                std::floor(static_cast<double>(i) * o.penalised_share);
    }
  }
  *out = std::move(w);
  return "";
}

}  // namespace banyan::bench::serve
