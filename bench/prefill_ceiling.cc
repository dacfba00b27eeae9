// prefill_ceiling: the physical ceiling of prefilling prompts of a model shape on this GPU,
// measured here, for bench/serve/prefill.sh to set served prefill rates against.
//
//   prefill_ceiling [--model dummy:<shape>[:vocab=N] | --shape NAME]
//                   [--cases 1x2048,1x8192,1x32768,64x2048] [--budget 8192] [--fp8] [--reps 10]
//
// A case NxL is N prompts of L new tokens each (nothing cached), all arriving at once. The
// ceiling of a case is the time of its matrix products alone at the rates this GPU reaches:
//  - the GEMMs: the prompts' tokens packed in arrival order into steps of at most --budget tokens
//    (banyand's --prefill-budget), each step's projections measured as bench/gemm_ceiling.h does
//    for that many rows (bf16, or the FP8 path with --fp8), the LM head only for the prompts
//    whose last token the step holds;
//  - causal attention: per layer and query head, QK^T and PV over L(L+1)/2 query-key pairs of
//    head_dim each, 2 * head_dim * L * (L + 1) FLOPs per prompt, at the dense bf16 rate of a
//    square cuBLAS GEMM on this GPU (MeasureDenseGemmFlops), the rate the tensor cores reach.
// Norms, RoPE, the KV writes and sampling are left out: they are memory-bound and small at these
// lengths, so the ceiling is a little above what any implementation can reach.
// Output: one Markdown table, a row per case: tokens, steps, GEMM ms, attention ms, the
// ceiling's ms and tokens/s.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/gemm_ceiling.h"
#include "model/dummy_weights.h"
#include "model/model_bundle.h"

namespace banyan {
namespace {

struct Case {
  int prompts = 0;
  int tokens = 0;  // per prompt
};

struct Options {
  std::string model = "dummy:llama-3-8b-shape:vocab=128256";
  std::vector<Case> cases = {{1, 2048}, {1, 8192}, {1, 32768}, {64, 2048}};
  int budget = 8192;
  bool fp8 = false;
  int reps = 10;
};

// One prefill step of the packing: its rows and the prompts it finishes.
struct Step {
  int rows = 0;
  int finished = 0;
  bool operator<(const Step& o) const {
    return std::pair(rows, finished) < std::pair(o.rows, o.finished);
  }
};

// The steps of `c`: prompts' tokens in arrival order, at most `budget` per step.
std::vector<Step> Pack(const Case& c, int budget) {
  std::vector<Step> steps;
  Step cur;
  for (int p = 0; p < c.prompts; ++p) {
    int left = c.tokens;
    while (left > 0) {
      const int take = std::min(left, budget - cur.rows);
      cur.rows += take;
      left -= take;
      if (left == 0) ++cur.finished;
      if (cur.rows == budget) {
        steps.push_back(cur);
        cur = {};
      }
    }
  }
  if (cur.rows > 0) steps.push_back(cur);
  return steps;
}

bool ParseCases(const std::string& text, std::vector<Case>* out) {
  out->clear();
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> nl = absl::StrSplit(item, 'x');
    Case c;
    if (nl.size() != 2 || !absl::SimpleAtoi(nl[0], &c.prompts) ||
        !absl::SimpleAtoi(nl[1], &c.tokens) || c.prompts < 1 || c.tokens < 1) {
      return false;
    }
    out->push_back(c);
  }
  return !out->empty();
}

int Usage() {
  std::fprintf(stderr,
               "usage: prefill_ceiling [--model dummy:<shape>[:vocab=N] | --shape NAME] "
               "[--cases 1x2048,1x8192,1x32768,64x2048] [--budget 8192] [--fp8] [--reps 10]\n");
  return 2;
}

int Run(const Options& o) {
  absl::StatusOr<model::ModelConfig> cfg = model::ShapeOrDummyConfig(o.model);
  if (!cfg.ok()) {
    std::fprintf(stderr, "prefill_ceiling: %s\n", std::string(cfg.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<double> dense = bench::MeasureDenseGemmFlops(8192, o.reps);
  if (!dense.ok()) {
    std::fprintf(stderr, "prefill_ceiling: dense GEMM: %s\n",
                 std::string(dense.status().message()).c_str());
    return 1;
  }
  std::printf("dense bf16 GEMM rate (8192^3, cuBLAS): %.1f TFLOP/s\n", *dense * 1e-12);
  std::printf("projections: %s; prefill budget %d tokens per step\n\n",
              o.fp8 ? "FP8 (W8A8, per-channel scales), LM head bf16" : "bf16", o.budget);
  std::printf("| case | tokens | steps | GEMM ms | attention ms | ceiling ms | ceiling tok/s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  std::map<Step, double> measured;  // one measurement per distinct step
  for (const Case& c : o.cases) {
    double gemm = 0;
    const std::vector<Step> steps = Pack(c, o.budget);
    for (const Step& s : steps) {
      auto it = measured.find(s);
      if (it == measured.end()) {
        absl::StatusOr<double> t = bench::MeasureProjectionGemmSeconds(
            *cfg, s.rows, o.reps, o.fp8, /*fp8_gemv_rows=*/0, s.finished);
        if (!t.ok()) {
          std::fprintf(stderr, "prefill_ceiling: GEMM step of %d rows: %s\n", s.rows,
                       std::string(t.status().message()).c_str());
          return 1;
        }
        it = measured.emplace(s, *t).first;
      }
      gemm += it->second;
    }
    const double L = c.tokens;
    const double attention_flops = 2.0 * cfg->head_dim() * L * (L + 1) * cfg->n_heads *
                                   cfg->n_layers * c.prompts;
    const double attention = attention_flops / *dense;
    const double total = gemm + attention;
    const double tokens = static_cast<double>(c.prompts) * c.tokens;
    std::printf("| %dx%d | %.0f | %zu | %.2f | %.2f | %.2f | %.0f |\n", c.prompts, c.tokens,
                tokens, steps.size(), gemm * 1e3, attention * 1e3, total * 1e3, tokens / total);
  }
  return 0;
}

}  // namespace
}  // namespace banyan

int main(int argc, char** argv) {
  banyan::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--fp8") {
      o.fp8 = true;
      continue;
    }
    const char* v = value();
    if (v == nullptr) return banyan::Usage();
    if (a == "--model") {
      o.model = v;
    } else if (a == "--shape") {
      o.model = v;
    } else if (a == "--cases") {
      if (!banyan::ParseCases(v, &o.cases)) return banyan::Usage();
    } else if (a == "--budget") {
      if (!absl::SimpleAtoi(v, &o.budget) || o.budget < 1) return banyan::Usage();
    } else if (a == "--reps") {
      if (!absl::SimpleAtoi(v, &o.reps) || o.reps < 1) return banyan::Usage();
    } else {
      return banyan::Usage();
    }
  }
  return banyan::Run(o);
}
