// TPP attention microbenchmark: the cases of ../shared/PERFORMANCE.md section 1, a no-sharing
// case per shape, a hierarchical case, and issue 15's serving regimes (7B MHA and Llama-3-8B
// heads at B = 256 / 1,024 with 2K / 16K prefixes and 1..64-token tails, a 64-row 4-level tree),
// each run with `tpp` (plan with sharing) and `paged` (the same tree, every row reads its whole
// context). The cases, their trees and floors are in bench/tpp/cases.{h,cc}.
//
// Per case and mode: the median of CUDA-graph replays (one graph = one decode attention call),
// the L2 flushed (256 MiB memset) before every replay and outside the timed events. Reported:
// floor = max(bytes / 4.4 TB/s, FLOPs / 750 TFLOP/s) (bench/physical_limit.h) with bytes = shared
// KV once + every row's private KV (K and V, 2 bytes each) and FLOPs = 4 * q_heads * d * the sum
// of the rows' contexts; achieved
// bandwidth = those bytes / time; time / floor; tpp / paged. The tpp and paged outputs are
// compared (relative norm) as a sanity check at scale.
//
// Results before 2026-12-04 (sixteenth session) also have mode `paged_generic`: the generic
// paged decode kernel the engine then kept for head dims without a TPP family (TPP's generic
// phase 2 replaced it), with its output compared to `paged`'s as paged_kernels_relnorm.
//
// Output: one JSON object per line (for bench/tpp/merge_table.py), then a Markdown table. The
// first lines give the launch floor: the same timing of a graph of 1 and of 3 empty kernels
// (PDL-chained like phase 1, phase 2 and the merge), what a call costs before any work.
// Usage: tpp_bench [--reps N] [--only SUBSTRING of name_b<B>_p<shared>] [--sweep] [--dry-run]
//                  [--kv bf16|fp8|both]
// --kv fp8: an FP8 KV cache (kernels/kv_fp8.h), its floor counted in its bytes (JSON "kv");
// --kv both: each case with bf16 and with FP8 KV, then a table of the two side by side
// (--kv-fp8 is --kv fp8).
// --dry-run needs no GPU: it builds every selected case's tree and plan on the host and prints
// its JSON line with the floor (mode "plan"), then the table without timings.
// --sweep also times TppOptions variants (tpp_m64, tpp_nopdl, ...; TPP_VARIANTS, a comma
// list, narrows them) and forced phase-1 split counts (tpp_k<N>; TPP_SPLITS, empty for none).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bench/physical_limit.h"
#include "bench/tpp/bench_fill.h"
#include "bench/tpp/launch_floor.h"
#include "bench/tpp/cases.h"
#include "kernels/cuda/tpp/tpp_attention.h"
#include "kernels/kv_fp8.h"
#include "engine/plan_view.h"
#include "kvcache/attention_plan.h"
#include "kvcache/prefix_tree.h"

namespace banyan::bench {
namespace {

using kernels::PlanView;
using kernels::cuda::DType;
using kernels::cuda::tpp::TppOptions;
using kernels::cuda::tpp::TppPhase1WgmmaAvailable;
using kernels::cuda::tpp::TppProblem;
using kernels::cuda::tpp::TppRunArgs;
using kernels::cuda::tpp::TppWorkPlan;
using kvcache::AttentionPlan;
using kvcache::SeqId;

using Case = TppCase;
constexpr int kChunk = kTppBenchChunk;

#define CHECK_CUDA(expr)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                   \
                   cudaGetErrorString(e_));                                                \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

struct Timing {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
};

class Runner {
 public:
  Runner(int reps) : reps_(reps) {
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    CHECK_CUDA(cudaMalloc(&flush_, kFlushBytes));
    CHECK_CUDA(cudaEventCreate(&start_));
    CHECK_CUDA(cudaEventCreate(&stop_));
    int dev = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, dev));
  }
  int num_sms() const { return num_sms_; }

  // Captures one attention call in a graph and times its replays.
  Timing Time(const TppWorkPlan& wp, const TppRunArgs& args, bool paged) {
    return Time([&](cudaStream_t s) {
      return paged ? kernels::cuda::tpp::PagedDecodeAttention(wp, args, s)
                   : kernels::cuda::tpp::TppDecodeAttention(wp, args, s);
    });
  }
  // The same for any launch sequence on the given stream.
  Timing Time(const std::function<absl::Status(cudaStream_t)>& launch) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal));
    absl::Status st = launch(stream_);
    CHECK_CUDA(cudaStreamEndCapture(stream_, &graph));
    if (!st.ok()) {
      std::fprintf(stderr, "launch: %s\n", std::string(st.message()).c_str());
      std::exit(1);
    }
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    std::vector<double> ts;
    for (int i = 0; i < reps_; ++i) {
      CHECK_CUDA(cudaMemsetAsync(flush_, i & 0xff, kFlushBytes, stream_));
      CHECK_CUDA(cudaEventRecord(start_, stream_));
      CHECK_CUDA(cudaGraphLaunch(exec, stream_));
      CHECK_CUDA(cudaEventRecord(stop_, stream_));
      CHECK_CUDA(cudaEventSynchronize(stop_));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
      ts.push_back(ms * 1000.0);
    }
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
    std::sort(ts.begin(), ts.end());
    Timing t;
    t.median_us = ts[ts.size() / 2];
    t.p10_us = ts[ts.size() / 10];
    t.p90_us = ts[ts.size() * 9 / 10];
    return t;
  }
  cudaStream_t stream() const { return stream_; }
  void Attach(TppRunArgs& a) const {
    a.side_stream = side_;
    a.fork_event = fork_;
    a.join_event = join_;
  }

 private:
  static constexpr size_t kFlushBytes = 256u << 20;
  int reps_;
  int num_sms_ = 132;
  cudaStream_t stream_, side_;
  cudaEvent_t fork_, join_;
  void* flush_ = nullptr;
  cudaEvent_t start_, stop_;
};

struct Result {
  std::string mode;
  Timing t;
  TppOptions options;
  int p1_items = 0, p2_items = 0, p1_splits = 0, p2_splits = 0, warps = 0, deferred = 0;
};

double RelNorm(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  auto f = [](uint16_t x) {
    uint32_t u = static_cast<uint32_t>(x) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return static_cast<double>(v);
  };
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = f(a[i]), y = f(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The items of a comma list in environment variable `name` (`fallback` when it is unset).
std::vector<std::string> EnvList(const char* name, const char* fallback) {
  const char* env = std::getenv(name);
  const std::string list = env != nullptr ? env : fallback;
  std::vector<std::string> items;
  for (const absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    items.emplace_back(item);
  }
  return items;
}

// TPP_SPLITS: the forced phase-1 split counts of --sweep.
std::vector<int> ForcedSplits() {
  std::vector<int> ks;
  for (const std::string& item : EnvList("TPP_SPLITS", "1,2,4,8,16,32")) {
    const int k = std::atoi(item.c_str());
    if (k > 0) ks.push_back(k);
  }
  return ks;
}

// TPP_VARIANTS: the sweep's option variants to run (tpp_m128, ...); all when unset, none when
// set but empty.
bool RunVariant(const std::string& mode) {
  if (std::getenv("TPP_VARIANTS") == nullptr) return true;
  const std::vector<std::string> only = EnvList("TPP_VARIANTS", "");
  return std::find(only.begin(), only.end(), mode) != only.end();
}

// The default modes' times of one case (for the bf16 / FP8 comparison table).
struct CaseTimes {
  double floor_us = 0, tpp_us = 0, paged_us = 0;
};

CaseTimes RunCase(Runner& runner, const Case& c, bool sweep, bool kv_fp8,
                  std::vector<std::string>* table) {
  std::mt19937_64 rng(12345);
  auto pool = kvcache::ChunkPool::Create(static_cast<int32_t>(TppPoolChunks(c)), kChunk);
  if (!pool.ok()) std::exit(1);
  kvcache::PrefixTree tree(&*pool);
  std::vector<SeqId> rows = BuildTppTree(tree, c, rng);
  AttentionPlan shared_plan = kvcache::BuildAttentionPlan(tree, rows, {.share = true});
  AttentionPlan paged_plan = kvcache::BuildAttentionPlan(tree, rows, {.share = false});

  // Device data: KV for the chunks actually used, q, out.
  int32_t max_chunk = 0;
  for (int32_t ch : paged_plan.span_chunk) max_chunk = std::max(max_chunk, ch);
  int64_t v_offset = static_cast<int64_t>(c.hkv) * kChunk * c.d;
  int64_t chunk_stride = 2 * v_offset, scale_offset = 0;
  if (kv_fp8) {
    const kernels::KvFp8Layout l = kernels::KvFp8LayoutOf(c.hkv, kChunk, c.d);
    v_offset = l.v_offset;
    chunk_stride = l.chunk_stride;
    scale_offset = l.scale_offset;
  }
  const size_t kv_elems = static_cast<size_t>(max_chunk + 1) * chunk_stride;
  const size_t q_elems = static_cast<size_t>(c.batch) * c.hq * c.d;
  void *kv = nullptr, *q = nullptr, *out_tpp = nullptr, *out_paged = nullptr;
  CHECK_CUDA(cudaMalloc(&kv, kv_elems * (kv_fp8 ? 1 : 2)));
  CHECK_CUDA(cudaMalloc(&q, q_elems * 2));
  CHECK_CUDA(cudaMalloc(&out_tpp, q_elems * 2));
  CHECK_CUDA(cudaMalloc(&out_paged, q_elems * 2));
  if (kv_fp8) {
    CHECK_CUDA(FillRandomKvFp8(kv, max_chunk + 1, chunk_stride, scale_offset, 7, runner.stream()));
  } else {
    CHECK_CUDA(FillRandomBf16(kv, kv_elems, 1.0f, 7, runner.stream()));
  }
  CHECK_CUDA(FillRandomBf16(q, q_elems, 1.0f, 11, runner.stream()));

  const TppFloor floor = TppCaseFloor(c, shared_plan, kv_fp8);
  const double bytes = floor.bytes, flops = floor.flops, floor_us = floor.us;

  const TppProblem problem{c.hq, c.hkv, c.d, kChunk};
  std::vector<Result> results;
  auto run_mode = [&](const std::string& mode, const AttentionPlan& plan, bool paged,
                      TppOptions opt, void* out) {
    opt.num_sms = runner.num_sms();
    auto wp = TppWorkPlan::Build(engine::ViewOf(plan), problem, opt);
    if (!wp.ok()) {
      std::fprintf(stderr, "plan: %s\n", std::string(wp.status().message()).c_str());
      std::exit(1);
    }
    int32_t* image = nullptr;
    void* ws = nullptr;
    CHECK_CUDA(cudaMalloc(&image, wp->image_bytes()));
    CHECK_CUDA(cudaMalloc(&ws, wp->workspace_bytes()));
    CHECK_CUDA(cudaMemcpy(image, wp->image().data(), wp->image_bytes(), cudaMemcpyHostToDevice));
    TppRunArgs a;
    a.q = q;
    a.out = out;
    a.kv.base = kv;
    a.kv.chunk_stride = chunk_stride;
    a.kv.v_offset = v_offset;
    a.kv.chunk_size = kChunk;
    a.kv.num_kv_heads = c.hkv;
    a.kv.head_dim = c.d;
    a.kv.scale_offset = scale_offset;
    a.dtype = DType::kBf16;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    a.image = image;
    a.workspace = ws;
    runner.Attach(a);
    Result r;
    r.mode = mode;
    r.t = runner.Time(*wp, a, paged);
    r.options = opt;
    r.p1_items = wp->num_p1_items();
    r.p2_items = wp->num_p2_items();
    r.p1_splits = wp->max_p1_splits();
    r.p2_splits = wp->max_p2_splits();
    r.warps = wp->num_p1_items() > 0 ? wp->p1_block_m() : 0;
    r.deferred = wp->deferred_merge() ? 1 : 0;
    results.push_back(r);
    CHECK_CUDA(cudaFree(image));
    CHECK_CUDA(cudaFree(ws));
  };
  run_mode("tpp", shared_plan, false, TppOptions{}, out_tpp);
  run_mode("paged", paged_plan, true, TppOptions{}, out_paged);
  {
    // Phase 2 forced onto each kernel, in the same run: without the warp-per-head one (the CTA
    // kernels, tensor cores where the plan picks them), on it, and (GQA >= 4) on CUDA cores.
    TppOptions o;
    o.p2_warp = 0;
    if (shared_plan.num_segments() > 0) run_mode("tpp_p2cta", shared_plan, false, o, out_tpp);
    run_mode("paged_p2cta", paged_plan, true, o, out_paged);
    o.p2_warp = 1;
    if (shared_plan.num_segments() > 0) run_mode("tpp_p2warp", shared_plan, false, o, out_tpp);
    run_mode("paged_p2warp", paged_plan, true, o, out_paged);
    if (c.hq / c.hkv >= 4) {
      o.p2_warp = 0;
      o.p2_mma = 0;
      if (shared_plan.num_segments() > 0) run_mode("tpp_p2ffma", shared_plan, false, o, out_tpp);
      run_mode("paged_p2ffma", paged_plan, true, o, out_paged);
    }
  }
  if (shared_plan.num_segments() > 0 && TppPhase1WgmmaAvailable()) {
    TppOptions o;
    o.p1_wgmma = 0;  // the mma.sync phase 1, measured beside the default wgmma one
    run_mode("tpp_mma", shared_plan, false, o, out_tpp);
    o.p1_wgmma = 2;  // wgmma without warp specialisation
    run_mode("tpp_nows", shared_plan, false, o, out_tpp);
  }
  if (sweep) {
    // The private tails' split bound (TppOptions::p2_max_splits, default 16) on the paged plan.
    for (int k : {8, 32}) {
      TppOptions o;
      o.p2_max_splits = k;
      run_mode("paged_p2max" + std::to_string(k), paged_plan, true, o, out_paged);
    }
  }
  if (sweep && shared_plan.num_segments() > 0) {
    // One plan option changed per variant (the paged ones on the paged plan; the warp kernel
    // alone on it is `paged_p2warp` above).
    struct Variant {
      const char* mode;
      bool paged;
      void (*set)(TppOptions&);
    };
    const Variant variants[] = {
        {"tpp_m64", false, [](TppOptions& o) { o.p1_block_m = 64; }},
        {"tpp_m128", false, [](TppOptions& o) { o.p1_block_m = 128; }},
        {"tpp_nopdl", false, [](TppOptions& o) { o.pdl = false; }},
        {"tpp_split1k", false, [](TppOptions& o) { o.p1_min_split_tokens = 1024; }},
        {"tpp_split64", false, [](TppOptions& o) { o.p1_min_split_tokens = 64; }},
        {"tpp_split256", false, [](TppOptions& o) { o.p1_min_split_tokens = 256; }},
        {"tpp_fused", false, [](TppOptions& o) { o.defer_merge = 0; }},
        {"tpp_deferred", false, [](TppOptions& o) { o.defer_merge = 1; }},
        {"paged_warp_split256", true,
         [](TppOptions& o) {
           o.p2_warp = 1;
           o.p2_max_split_tokens = 256;
         }},
        {"paged_split256", true,
         [](TppOptions& o) {
           o.p2_warp = 0;
           o.p2_max_split_tokens = 256;
         }},
        {"tpp_p2s2", false, [](TppOptions& o) { o.p2_stages = 2; }},
        {"tpp_p2s3", false, [](TppOptions& o) { o.p2_stages = 3; }},
    };
    for (const Variant& v : variants) {
      if (!RunVariant(v.mode)) continue;
      TppOptions o;
      v.set(o);
      run_mode(v.mode, v.paged ? paged_plan : shared_plan, v.paged, o,
               v.paged ? out_paged : out_tpp);
    }
    // Phase-1 split counts forced (the longest segment's; modes tpp_k<N>), for fitting the split
    // model: TPP_SPLITS (a comma list) or 1, 2, 4, 8, 16, 32.
    for (int k : ForcedSplits()) {
      TppOptions o;
      o.p1_splits = k;
      o.p1_min_split_tokens = 16;
      run_mode("tpp_k" + std::to_string(k), shared_plan, false, o, out_tpp);
    }
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> ht(q_elems), hp(q_elems);
  CHECK_CUDA(cudaMemcpy(ht.data(), out_tpp, q_elems * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hp.data(), out_paged, q_elems * 2, cudaMemcpyDeviceToHost));
  const double diff = RelNorm(ht, hp);

  const double tpp_us = results[0].t.median_us, paged_us = results[1].t.median_us;
  for (const Result& r : results) {
    std::printf(
        "{\"bench\":\"tpp\",\"case\":\"%s\",\"B\":%d,\"Hq\":%d,\"Hkv\":%d,\"d\":%d,"
        "\"prefix\":%d,\"suffix\":%d,\"share\":%s,\"groups\":%d,\"mode\":\"%s\","
        "\"median_us\":%.2f,\"p10_us\":%.2f,\"p90_us\":%.2f,\"floor_us\":%.2f,"
        "\"bytes\":%.0f,\"flops\":%.0f,\"achieved_TBps\":%.3f,\"achieved_TFLOPs\":%.1f,"
        "\"segments\":%d,\"p1_items\":%d,\"p1_block_m\":%d,\"p1_splits\":%d,\"p2_items\":%d,"
        "\"p2_splits\":%d,\"deferred\":%d,\"tpp_vs_paged_relnorm\":%.2e,"
        "\"levels\":%d,\"tail_min\":%d,\"shared_desc\":\"%s\",\"private_desc\":\"%s\","
        "\"kv\":\"%s\"}\n",
        c.name.c_str(), c.batch, c.hq, c.hkv, c.d, c.shared, c.priv, c.share ? "true" : "false",
        c.levels.empty() ? 0 : c.levels[0].groups, r.mode.c_str(), r.t.median_us, r.t.p10_us, r.t.p90_us, floor_us, bytes, flops,
        bytes / (r.t.median_us * 1e-6) / 1e12, flops / (r.t.median_us * 1e-6) / 1e12,
        shared_plan.num_segments(), r.p1_items, r.warps, r.p1_splits, r.p2_items, r.p2_splits,
        r.deferred, diff, static_cast<int>(c.levels.size()), c.tail_min,
        c.SharedDesc().c_str(), c.PrivateDesc().c_str(), kv_fp8 ? "fp8" : "bf16");
  }
  std::fflush(stdout);
  char line[512];
  std::snprintf(line, sizeof(line),
                "| %s | %d | %d | %d | %d | %s | %s | %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |",
                c.name.c_str(), c.batch, c.hq, c.hkv, c.d, c.SharedDesc().c_str(),
                c.PrivateDesc().c_str(), kv_fp8 ? "fp8" : "bf16", floor_us, tpp_us,
                paged_us, bytes / (tpp_us * 1e-6) / 1e12, tpp_us / floor_us, tpp_us / paged_us);
  table->push_back(line);

  CHECK_CUDA(cudaFree(kv));
  CHECK_CUDA(cudaFree(q));
  CHECK_CUDA(cudaFree(out_tpp));
  CHECK_CUDA(cudaFree(out_paged));
  return CaseTimes{floor_us, tpp_us, paged_us};
}

// The case's tree and plans on the host only: its JSON line (mode "plan", no timings; the work
// plan's phase-1 choice as on an H200: the warp-specialised wgmma path, 132 SMs) and a row.
void PlanCase(const Case& c, std::vector<std::string>* table) {
  std::mt19937_64 rng(12345);
  auto pool = kvcache::ChunkPool::Create(static_cast<int32_t>(TppPoolChunks(c)), kChunk);
  if (!pool.ok()) std::exit(1);
  kvcache::PrefixTree tree(&*pool);
  std::vector<SeqId> rows = BuildTppTree(tree, c, rng);
  const AttentionPlan plan = kvcache::BuildAttentionPlan(tree, rows, {.share = true});
  const TppFloor f = TppCaseFloor(c, plan);
  TppOptions h200;
  h200.p1_wgmma = 1;
  auto wp = TppWorkPlan::Build(engine::ViewOf(plan), TppProblem{c.hq, c.hkv, c.d, kChunk}, h200);
  const int p1_splits = wp.ok() ? wp->max_p1_splits() : -1;
  const int p1_block_m = wp.ok() ? wp->p1_block_m() : -1;
  const int deferred = wp.ok() && wp->deferred_merge() ? 1 : 0;
  std::printf(
      "{\"bench\":\"tpp\",\"case\":\"%s\",\"B\":%d,\"Hq\":%d,\"Hkv\":%d,\"d\":%d,"
      "\"prefix\":%d,\"suffix\":%d,\"share\":%s,\"mode\":\"plan\",\"floor_us\":%.2f,"
      "\"bytes\":%.0f,\"flops\":%.0f,\"segments\":%d,\"shared_tokens\":%lld,"
      "\"private_tokens\":%lld,\"levels\":%d,\"tail_min\":%d,\"shared_desc\":\"%s\","
      "\"private_desc\":\"%s\",\"p1_block_m\":%d,\"p1_splits\":%d,\"deferred\":%d}\n",
      c.name.c_str(), c.batch, c.hq, c.hkv, c.d, c.shared, c.priv, c.share ? "true" : "false", f.us,
      f.bytes, f.flops, plan.num_segments(), static_cast<long long>(plan.shared_tokens()),
      static_cast<long long>(plan.private_tokens()), static_cast<int>(c.levels.size()),
      c.tail_min, c.SharedDesc().c_str(), c.PrivateDesc().c_str(), p1_block_m, p1_splits,
      deferred);
  char line[512];
  std::snprintf(line, sizeof(line), "| %s | %d | %d | %d | %d | %s | %s | bf16 | %.1f | - | - | - | - | - |",
                c.name.c_str(), c.batch, c.hq, c.hkv, c.d, c.SharedDesc().c_str(),
                c.PrivateDesc().c_str(), f.us);
  table->push_back(line);
}

}  // namespace
}  // namespace banyan::bench

int main(int argc, char** argv) {
  using namespace banyan::bench;
  int reps = 30;
  bool sweep = false;
  bool dry_run = false;
  std::vector<bool> kvs = {false};  // FP8 cache or not, each case in this order
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else if (!std::strcmp(argv[i], "--sweep")) {
      sweep = true;
    } else if (!std::strcmp(argv[i], "--dry-run")) {
      dry_run = true;
    } else if (!std::strcmp(argv[i], "--kv-fp8")) {
      kvs = {true};
    } else if (!std::strcmp(argv[i], "--kv") && i + 1 < argc) {
      const std::string kv = argv[++i];
      if (kv != "bf16" && kv != "fp8" && kv != "both") {
        std::fprintf(stderr, "--kv takes bf16, fp8 or both\n");
        return 2;
      }
      kvs = kv == "both" ? std::vector<bool>{false, true} : std::vector<bool>{kv == "fp8"};
    } else {
      std::fprintf(stderr, "usage: tpp_bench [--reps N] [--only SUBSTRING] [--sweep] [--dry-run] "
                           "[--kv bf16|fp8|both]\n");
      return 2;
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "--reps must be >= 1\n");
    return 2;
  }
  const char* kTableHead =
      "\n| case | B | q heads | kv heads | d | shared | private | kv | floor us | tpp us | "
      "paged us | tpp TB/s | tpp/floor | tpp/paged |\n|---|---|---|---|---|---|---|---|---|---|"
      "---|---|---|---|\n";
  if (dry_run) {
    std::vector<std::string> table;
    for (const Case& c : TppCases()) {
      if (only.empty() || c.Id().find(only) != std::string::npos) PlanCase(c, &table);
    }
    std::printf("%s", kTableHead);
    for (const auto& l : table) std::printf("%s\n", l.c_str());
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"bench\":\"tpp_device\",\"name\":\"%s\",\"sms\":%d,\"l2_MB\":%.0f}\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1048576.0);
  Runner runner(reps);
  // The launch floor: graphs of 1 and 3 empty kernels (a TPP call is phase 1, phase 2 and the
  // merge), timed like a call.
  for (int kernels : {1, 3}) {
    const Timing t = runner.Time([&](cudaStream_t s) {
      const cudaError_t e = LaunchEmptyKernels(kernels, s);
      return e == cudaSuccess ? absl::OkStatus() : absl::InternalError(cudaGetErrorString(e));
    });
    std::printf("{\"bench\":\"tpp_launch_floor\",\"kernels\":%d,\"median_us\":%.2f,"
                "\"p10_us\":%.2f,\"p90_us\":%.2f}\n",
                kernels, t.median_us, t.p10_us, t.p90_us);
  }
  std::vector<std::string> table, both;
  for (const Case& c : TppCases()) {
    if (!only.empty() && c.Id().find(only) == std::string::npos) continue;
    std::vector<CaseTimes> t;
    for (bool kv8 : kvs) t.push_back(RunCase(runner, c, sweep, kv8, &table));
    if (t.size() == 2) {
      char line[512];
      std::snprintf(line, sizeof(line),
                    "| %s | %d | %d | %s | %s | %.1f | %.1f | %.2f | %.1f | %.2f | %.1f | %.1f | %.2f |",
                    c.name.c_str(), c.batch, c.hkv, c.SharedDesc().c_str(), c.PrivateDesc().c_str(),
                    t[0].tpp_us, t[1].tpp_us, t[1].tpp_us / t[0].tpp_us, t[1].floor_us,
                    t[1].tpp_us / t[1].floor_us, t[0].paged_us, t[1].paged_us,
                    t[1].paged_us / t[0].paged_us);
      both.push_back(line);
    }
  }
  std::printf("%s", kTableHead);
  for (const auto& l : table) std::printf("%s\n", l.c_str());
  if (!both.empty()) {
    // --kv both: the FP8 cache against bf16, same cases, same run.
    std::printf("\n| case | B | kv heads | shared | private | tpp us bf16 | tpp us fp8 | fp8 / bf16 | "
                "fp8 floor us | fp8 tpp/floor | paged us bf16 | paged us fp8 | fp8 / bf16 |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& l : both) std::printf("%s\n", l.c_str());
  }
  return 0;
}
