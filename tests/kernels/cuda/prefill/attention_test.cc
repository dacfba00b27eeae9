// The CUDA attention kernels against the CPU reference kernels (kernels/cpu), on KV and queries
// rounded to the kernel's dtype first so that both sides read identical values: decode (TPP,
// every head dim from 8 to 256) over plans with and without sharing (random prefix trees,
// context lengths not multiples of the chunk size, long contexts split into pieces, batch up to
// 1024), and causal prefill over a cached path plus new tokens (tiles of 64 rows on mma.sync and,
// on compute capability 9.0, of 128 on wgmma); with a 16-bit cache and with an
// FP8 one (kernels/kv_fp8.h: rows quantized here, the reference reading their dequantized
// values, which the kernels must reproduce exactly before their own roundings). Random data
// fresh each run, outputs poisoned, NaN never passes.
//
// Tolerance: the GPU rounds its output to the dtype (relative error about 2^-9 / sqrt(3) for bf16,
// 2^-12 for fp16) and the prefill kernel rounds softmax probabilities to the dtype before the P.V
// product. Relative-norm bounds: 1e-2 (bf16), 2e-3 (fp16); a wrong index gives O(1).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/tpp_attention.h"
#include "kernels/cuda/prefill/attention.h"
#include "kernels/cuda/prefill/attention_work.h"
#include "kernels/cuda/tpp/tpp_attention.h"
#include "kernels/kv_fp8.h"
#include "engine/plan_view.h"
#include "kvcache/attention_plan.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "model/dtype.h"
#include "tests/testing/gpu_test_util.h"
#include "tests/testing/random.h"
#include "tests/testing/random_tree.h"

namespace banyan::kernels::cuda {
namespace {

using ::banyan::testing::DeviceArray;
using ::banyan::testing::FromDtype;
using ::banyan::testing::RelErr;
using ::banyan::testing::RoundTo;
using ::banyan::testing::ToDtype;

struct Case {
  int head_dim;
  int kv_heads;
  int gqa;
  int chunk_size;
  DType dtype;
  bool kv8 = false;  // an FP8 KV cache (kernels/kv_fp8.h)
};

double Tolerance(DType dt) { return dt == DType::kBf16 ? 1e-2 : 2e-3; }

// A KV store for one layer with random values already rounded to the dtype, on host and device.
struct TestKv {
  TestKv(const Case& c, int chunks, std::mt19937_64& rng) {
    cpu.chunk_size = c.chunk_size;
    cpu.num_kv_heads = c.kv_heads;
    cpu.head_dim = c.head_dim;
    cpu.v_offset = int64_t{c.kv_heads} * c.chunk_size * c.head_dim;
    cpu.chunk_stride = 2 * cpu.v_offset;
    host.resize(static_cast<size_t>(chunks) * cpu.chunk_stride);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& x : host) x = RoundTo(c.dtype, nd(rng));
    cpu.base = host.data();
    gpu.chunk_stride = cpu.chunk_stride;
    gpu.v_offset = cpu.v_offset;
    if (c.kv8) {
      // Every row quantized by the rule (with the model library's E4M3 rounding); the host copy
      // becomes the dequantized values the kernels must read.
      const KvFp8Layout l = KvFp8LayoutOf(c.kv_heads, c.chunk_size, c.head_dim);
      gpu.chunk_stride = l.chunk_stride;
      gpu.v_offset = l.v_offset;
      gpu.scale_offset = l.scale_offset;
      std::vector<uint8_t> bytes(static_cast<size_t>(chunks) * l.chunk_stride, 0);
      const int64_t rows = int64_t{c.kv_heads} * c.chunk_size, d = c.head_dim;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        for (int64_t kv = 0; kv < 2; ++kv) {
          for (int64_t r = 0; r < rows; ++r) {
            float* x = host.data() + ch * cpu.chunk_stride + kv * cpu.v_offset + r * d;
            uint8_t* codes = bytes.data() + ch * l.chunk_stride + kv * l.v_offset + r * d;
            const int e = QuantizeKvRowFp8(x, static_cast<int>(d), codes, model::FloatToFp8E4M3);
            for (int i = 0; i < d; ++i) x[i] = std::ldexp(model::Fp8E4M3ToFloat(codes[i]), e);
            bytes[ch * l.chunk_stride + l.scale_offset + kv * rows + r] =
                static_cast<uint8_t>(static_cast<int8_t>(e));
          }
        }
      }
      dev8 = std::make_unique<DeviceArray<uint8_t>>(bytes);
      gpu.base = dev8->get();
    } else {
      dev = std::make_unique<DeviceArray<uint16_t>>(ToDtype(c.dtype, host));
      gpu.base = dev->get();
    }
    gpu.chunk_size = c.chunk_size;
    gpu.num_kv_heads = c.kv_heads;
    gpu.head_dim = c.head_dim;
  }
  std::vector<float> host;
  KvView cpu;
  std::unique_ptr<DeviceArray<uint16_t>> dev;
  std::unique_ptr<DeviceArray<uint8_t>> dev8;
  KvViewDev gpu;
};

std::vector<float> RandomRounded(DType dt, size_t n, std::mt19937_64& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = RoundTo(dt, nd(rng));
  return v;
}

// Runs TPP decode attention over `plan` (two-phase where it has segments and the head dim a
// compiled family; phase 2 alone on the generic kernel for other head dims), rows cut into
// pieces of at most max_piece_tokens; returns the output as floats.
std::vector<float> RunGpuDecode(const Case& c, const TestKv& kv, const kvcache::AttentionPlan& plan,
                                const std::vector<float>& q, int max_piece_tokens) {
  const int hq = c.kv_heads * c.gqa;
  tpp::TppOptions opt;
  opt.p2_max_split_tokens = max_piece_tokens;
  auto wp = tpp::TppWorkPlan::Build(engine::ViewOf(plan),
                                    tpp::TppProblem{hq, c.kv_heads, c.head_dim, c.chunk_size}, opt);
  EXPECT_TRUE(wp.ok()) << wp.status();
  if (!wp.ok()) return {};
  DeviceArray<int32_t> image(wp->image());
  DeviceArray<float> workspace((wp->workspace_bytes() + 3) / 4);  // poisoned
  DeviceArray<uint16_t> qd(ToDtype(c.dtype, q));
  DeviceArray<uint16_t> out(q.size());  // poisoned
  tpp::TppRunArgs a;
  a.q = qd.get();
  a.out = out.get();
  a.kv = kv.gpu;
  a.dtype = c.dtype;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.image = image.get();
  a.workspace = workspace.get();
  const absl::Status s = tpp::TppDecodeAttention(*wp, a, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return FromDtype(c.dtype, out.Download());
}

std::vector<float> RunCpuDecode(const Case& c, const TestKv& kv, const kvcache::AttentionPlan& plan,
                                const std::vector<float>& q) {
  const int hq = c.kv_heads * c.gqa;
  std::vector<float> out(q.size(), std::nanf(""));
  std::vector<float> po(std::max(1, plan.num_partials) * size_t(hq) * c.head_dim);
  std::vector<float> pl(std::max(1, plan.num_partials) * size_t(hq));
  DecodeAttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.kv = kv.cpu;
  p.plan = engine::ViewOf(plan);
  p.num_q_heads = hq;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.partial_o = po.data();
  p.partial_lse = pl.data();
  cpu::TppDecodeAttention(p);
  return out;
}

std::string Name(const Case& c) {
  return absl::StrCat("d", c.head_dim, " kvh", c.kv_heads, " g", c.gqa, " c", c.chunk_size, " ",
                      DTypeName(c.dtype), c.kv8 ? " kv fp8" : "");
}

TEST(CudaDecodeAttention, MatchesCpuOnRandomTrees) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<Case> cases = {
      {64, 2, 1, 16, DType::kBf16},  {64, 2, 4, 64, DType::kBf16}, {128, 2, 1, 64, DType::kBf16},
      {128, 1, 4, 16, DType::kBf16}, {128, 2, 4, 32, DType::kFp16}, {64, 3, 1, 16, DType::kFp16},
      {8, 2, 4, 16, DType::kBf16},   {32, 2, 2, 16, DType::kFp16}, {256, 1, 8, 64, DType::kBf16},
      {128, 1, 8, 16, DType::kBf16}, {64, 1, 2, 16, DType::kBf16}, {40, 2, 3, 16, DType::kBf16},
      // An FP8 KV cache.
      {64, 2, 4, 64, DType::kBf16, true}, {128, 1, 8, 16, DType::kBf16, true},
      {128, 2, 4, 32, DType::kFp16, true}, {8, 2, 4, 16, DType::kBf16, true},
      {256, 1, 8, 64, DType::kBf16, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(c));
    auto pool = kvcache::ChunkPool::Create(1024, c.chunk_size);
    ASSERT_TRUE(pool.ok());
    kvcache::PrefixTree tree(&*pool);
    ::banyan::testing::RandomTreeSpec spec;
    spec.global_prefix_max = 300;
    const std::vector<kvcache::SeqId> seqs = ::banyan::testing::BuildRandomTree(tree, rng, spec);
    ASSERT_FALSE(seqs.empty());
    const std::vector<kvcache::SeqId> rows = tree.DfsOrder();
    TestKv kv(c, 1024, rng);
    const int hq = c.kv_heads * c.gqa;
    const std::vector<float> q = RandomRounded(c.dtype, rows.size() * hq * c.head_dim, rng);
    for (bool share : {true, false}) {
      const auto plan = kvcache::BuildAttentionPlan(tree, rows, {.share = share});
      const std::vector<float> want = RunCpuDecode(c, kv, plan, q);
      for (int piece : {0, 37}) {  // 0: the plan's own cut; 37: many pieces, merges
        const double err = RelErr(RunGpuDecode(c, kv, plan, q, piece), want);
        EXPECT_LT(err, Tolerance(c.dtype)) << "share " << share << " pieces of " << piece;
      }
    }
  }
}

// Long private contexts: rows cut into many items and merged.
TEST(CudaDecodeAttention, LongContextsSplitAndMerge) {
  BANYAN_SEEDED_RNG(rng);
  for (const Case& c : {Case{128, 2, 4, 64, DType::kBf16}, Case{64, 4, 1, 16, DType::kFp16}}) {
    SCOPED_TRACE(Name(c));
    auto pool = kvcache::ChunkPool::Create(1024, c.chunk_size);
    ASSERT_TRUE(pool.ok());
    kvcache::PrefixTree tree(&*pool);
    for (int len : {3001, 4444, 1}) {
      std::vector<int32_t> toks(len);
      for (auto& t : toks) t = static_cast<int32_t>(rng() % 1000);
      ASSERT_TRUE(tree.Insert("", toks).ok());
    }
    const auto rows = tree.DfsOrder();
    TestKv kv(c, 1024, rng);
    const std::vector<float> q =
        RandomRounded(c.dtype, rows.size() * c.kv_heads * c.gqa * c.head_dim, rng);
    const auto plan = kvcache::BuildAttentionPlan(tree, rows, {.share = false});
    EXPECT_LT(RelErr(RunGpuDecode(c, kv, plan, q, 0), RunCpuDecode(c, kv, plan, q)),
              Tolerance(c.dtype));
  }
}

// 1024 rows sharing a prefix, private tails of 1..40 tokens.
TEST(CudaDecodeAttention, Batch1024) {
  BANYAN_SEEDED_RNG(rng);
  const Case c{128, 2, 4, 16, DType::kBf16};
  auto pool = kvcache::ChunkPool::Create(4096, c.chunk_size);
  ASSERT_TRUE(pool.ok());
  kvcache::PrefixTree tree(&*pool);
  std::vector<int32_t> prefix(301);
  for (auto& t : prefix) t = static_cast<int32_t>(rng() % 1000);
  for (int r = 0; r < 1024; ++r) {
    std::vector<int32_t> toks = prefix;
    const int tail = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < tail; ++i) toks.push_back(1000 + static_cast<int32_t>(rng() % 1000));
    ASSERT_TRUE(tree.Insert("", toks).ok());
  }
  const auto rows = tree.DfsOrder();
  ASSERT_EQ(rows.size(), 1024u);
  TestKv kv(c, 4096, rng);
  const std::vector<float> q =
      RandomRounded(c.dtype, rows.size() * c.kv_heads * c.gqa * c.head_dim, rng);
  for (bool share : {true, false}) {
    const auto plan = kvcache::BuildAttentionPlan(tree, rows, {.share = share});
    EXPECT_LT(RelErr(RunGpuDecode(c, kv, plan, q, 0), RunCpuDecode(c, kv, plan, q)),
              Tolerance(c.dtype))
        << "share " << share;
  }
}

// Prefill: several sequences with cached prefixes (some shared) and new tokens in one launch.
// A prefill work list on the device, and the kernels' parameters over it (queries q, rounded to
// the case's dtype; output poisoned).
struct DeviceWork {
  DeviceWork(const Case& c, const TestKv& kv, const PrefillWork& w, const std::vector<float>& q)
      : sc(w.span_chunk), sb(w.span_begin), se(w.span_end), sp(w.span_pos),
        ssb(w.seq_span_begin), sse(w.seq_span_end), sp0(w.seq_pos0), snq(w.seq_num_q),
        sqr(w.seq_q_row), ts(w.tile_seq), tm(w.tile_m0), tks(w.token_seq),
        qd(ToDtype(c.dtype, q)), out(q.size()) {
    p.q = qd.get();
    p.out = out.get();
    p.kv = kv.gpu;
    p.span_chunk = sc.get();
    p.span_begin = sb.get();
    p.span_end = se.get();
    p.span_pos = sp.get();
    p.seq_span_begin = ssb.get();
    p.seq_span_end = sse.get();
    p.seq_pos0 = sp0.get();
    p.seq_num_q = snq.get();
    p.seq_q_row = sqr.get();
    p.tile_seq = ts.get();
    p.tile_m0 = tm.get();
    p.token_seq = tks.get();
    p.num_tiles = w.num_tiles();
    p.block_m = w.block_m;
    p.num_tokens = w.num_tokens;
    p.q_row_begin = w.q_row_begin;
    p.num_q_heads = c.kv_heads * c.gqa;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  }
  DeviceArray<int32_t> sc, sb, se, sp, ssb, sse, sp0, snq, sqr, ts, tm, tks;
  DeviceArray<uint16_t> qd, out;
  PrefillParams p;
};

TEST(CudaPrefillAttention, MatchesCpu) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<Case> cases = {
      {64, 2, 1, 16, DType::kBf16},  {64, 1, 4, 64, DType::kBf16},  {128, 2, 1, 64, DType::kBf16},
      {128, 1, 4, 16, DType::kBf16}, {128, 2, 2, 32, DType::kFp16}, {64, 2, 8, 16, DType::kFp16},
      {8, 2, 4, 16, DType::kBf16},   {32, 1, 2, 16, DType::kFp16},  {256, 1, 2, 64, DType::kBf16},
      // An FP8 KV cache: the fast path (64, 128) and the generic one.
      {64, 1, 4, 64, DType::kBf16, true}, {128, 2, 2, 32, DType::kFp16, true},
      {128, 1, 4, 16, DType::kBf16, true}, {8, 2, 4, 16, DType::kBf16, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(c));
    const int hq = c.kv_heads * c.gqa;
    auto pool = kvcache::ChunkPool::Create(2048, c.chunk_size);
    ASSERT_TRUE(pool.ok());
    kvcache::PrefixTree tree(&*pool);
    TestKv kv(c, 2048, rng);
    // A quarter of the cases share a long prefix (past the wgmma kernel's ring of stages).
    const int shared_len = static_cast<int>(rng() % 4 == 0 ? 500 + rng() % 1000 : rng() % 200);
    std::vector<int32_t> shared(static_cast<size_t>(shared_len));
    for (auto& t : shared) t = static_cast<int32_t>(rng() % 1000);
    struct Seq {
      kvcache::AttentionPlan plan;
      int32_t pos0, num_q;
    };
    std::vector<Seq> seqs;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> toks = shared;
      const int extra = 1 + static_cast<int>(rng() % 200);
      for (int k = 0; k < extra; ++k) toks.push_back(static_cast<int32_t>(rng() % 1000));
      auto placed = tree.Insert("", toks);
      ASSERT_TRUE(placed.ok());
      Seq s;
      s.plan = kvcache::BuildAttentionPlan(tree, std::vector{placed->seq}, {.share = false});
      // New tokens: a random tail (including, sometimes, the whole sequence).
      const int len = static_cast<int>(toks.size());
      s.num_q = 1 + static_cast<int>(rng() % std::min(len, 150));
      if (rng() % 4 == 0) s.num_q = std::min(len, 600);
      s.pos0 = len - s.num_q;
      seqs.push_back(std::move(s));
    }
    int total_q = 0;
    for (const Seq& s : seqs) total_q += s.num_q;
    const std::vector<float> q = RandomRounded(c.dtype, size_t(total_q) * hq * c.head_dim, rng);
    std::vector<float> want(q.size(), std::nanf(""));
    std::vector<PrefillSeq> descs;
    int row = 0;
    for (const Seq& s : seqs) {
      cpu::PrefillAttentionParams p;
      p.q = q.data() + int64_t{row} * hq * c.head_dim;
      p.out = want.data() + int64_t{row} * hq * c.head_dim;
      p.kv = kv.cpu;
      p.span_chunk = s.plan.span_chunk.data();
      p.span_begin = s.plan.span_begin.data();
      p.span_end = s.plan.span_end.data();
      p.num_spans = s.plan.num_spans();
      p.q_pos0 = s.pos0;
      p.num_q = s.num_q;
      p.num_q_heads = hq;
      p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      cpu::PrefillAttention(p);
      descs.push_back(PrefillSeq{s.plan.span_chunk, s.plan.span_begin, s.plan.span_end, s.pos0,
                                 s.num_q, row});
      row += s.num_q;
    }
    // Tiles of 64 (mma.sync) and, where the device runs it, of 128 (wgmma): both kernels.
    std::vector<int32_t> tile_rows = {kPrefillBlockM};
    if (PrefillTileRows(kv.gpu) != kPrefillBlockM) tile_rows.push_back(PrefillTileRows(kv.gpu));
    for (const int32_t rows : tile_rows) {
      PrefillWork w;
      BuildPrefillWork(descs, c.gqa, rows, &w);
      DeviceWork dw(c, kv, w, q);
      const absl::Status s = PrefillAttention(c.dtype, dw.p, nullptr);
      ASSERT_TRUE(s.ok()) << s;
      const double err = RelErr(FromDtype(c.dtype, dw.out.Download()), want);
      EXPECT_LT(err, Tolerance(c.dtype))
          << "fast path " << HasFastAttentionPath(c.head_dim) << ", tiles of " << rows;
    }
  }
}

// The work list's tile size follows the kernel: 128 rows exactly where the wgmma kernel runs
// (compute capability 9.0), with a 16-bit and with an FP8 cache; head dims without a fast path
// 64 (the generic kernel reads no tiles). Tile sizes of neither kernel are refused.
TEST(CudaPrefillAttention, TileRowsFollowTheKernel) {
  BANYAN_SEEDED_RNG(rng);
  const int32_t wide = tpp::TppPhase1WgmmaAvailable() ? kPrefillWgmmaBlockM : kPrefillBlockM;
  for (const bool kv8 : {false, true}) {
    const Case c{128, 1, 4, 64, DType::kBf16, kv8};
    TestKv kv(c, 4, rng);
    EXPECT_EQ(PrefillTileRows(kv.gpu), wide) << "kv8 " << kv8;
    const std::vector<int32_t> chunk = {0}, begin = {0}, end = {8};
    const std::vector<PrefillSeq> descs = {PrefillSeq{chunk, begin, end, 0, 8, 0}};
    PrefillWork w;
    BuildPrefillWork(descs, c.gqa, 32, &w);
    const std::vector<float> q(size_t{8} * 4 * 128, 0.5f);
    DeviceWork dw(c, kv, w, q);
    EXPECT_EQ(PrefillAttention(c.dtype, dw.p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  }
  const Case generic{32, 1, 2, 16, DType::kBf16};
  TestKv kv(generic, 4, rng);
  EXPECT_EQ(PrefillTileRows(kv.gpu), kPrefillBlockM);
}

// InvariantAttention (the deterministic mode): one work list of sequences, each a span list and
// its new tokens; returns the raw 16-bit output (rows in the list's q-row order).
struct InvSeq {
  std::vector<int32_t> chunk, begin, end;
  int32_t pos0 = 0, num_q = 0;
};
// With `groups`, the sequences of each group (indices into seqs) share their first `positions`
// keys, read once (AddSharedPrefixGroups); `gtiles` returns how many group tiles that made. The
// work list's pieces come from AddInvariantPieces (head dims 64 and 128); `slots` returns its
// piece states (state_slots x q heads) and `states` how many of them the kernels wrote (the
// buffer is poisoned: NaN where nothing wrote); max_slots caps it (AddInvariantPieces).
std::vector<uint16_t> RunInvariant(const Case& c, const TestKv& kv, const std::vector<InvSeq>& seqs,
                                   const std::vector<float>& q,
                                   const std::vector<SharedPrefix>& groups = {},
                                   int* gtiles = nullptr, int64_t* states = nullptr,
                                   int64_t* slots = nullptr, int64_t max_slots = INT64_MAX) {
  std::vector<PrefillSeq> descs;
  int32_t row = 0;
  for (const InvSeq& s : seqs) {
    descs.push_back(PrefillSeq{s.chunk, s.begin, s.end, s.pos0, s.num_q, row});
    row += s.num_q;
  }
  const int hq = c.kv_heads * c.gqa;
  PrefillWork w;
  BuildPrefillWork(descs, c.gqa, kPrefillBlockM, &w);
  if (!groups.empty()) AddSharedPrefixGroups(groups, c.gqa, max_slots, &w);
  if (HasFastAttentionPath(c.head_dim)) AddInvariantPieces(c.gqa, max_slots, &w);
  if (gtiles != nullptr) *gtiles = w.num_gtiles();
  if (slots != nullptr) *slots = w.state_slots * hq;
  DeviceWork dw(c, kv, w, q);
  DeviceArray<int32_t> it(w.item_tile), ip(w.item_piece), spc(w.seq_pieces), sst(w.seq_state),
      ms(w.merge_seq), gf(w.grp_first), gc(w.grp_count), gm(w.grp_members), tg(w.gtile_group),
      tm(w.gtile_m0), tp(w.gtile_piece);
  DeviceArray<float> state(static_cast<size_t>(std::max<int64_t>(1, w.state_slots * hq)) *
                           PrefillStateStride(c.head_dim));
  dw.p.item_tile = it.get();
  dw.p.item_piece = ip.get();
  dw.p.seq_pieces = spc.get();
  dw.p.seq_state = sst.get();
  dw.p.merge_seq = ms.get();
  dw.p.grp_first = gf.get();
  dw.p.grp_count = gc.get();
  dw.p.grp_members = gm.get();
  dw.p.gtile_group = tg.get();
  dw.p.gtile_m0 = tm.get();
  dw.p.gtile_piece = tp.get();
  dw.p.state = state.get();
  dw.p.num_items = w.num_items();
  dw.p.num_fold_items = w.num_fold_items;
  dw.p.num_merge = w.num_merge();
  dw.p.num_gtiles = w.num_gtiles();
  const absl::Status st = InvariantAttention(c.dtype, dw.p, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  if (states != nullptr) {
    const std::vector<float> st_host = state.Download();
    const int64_t stride = PrefillStateStride(c.head_dim);
    *states = 0;
    for (int64_t r = 0; r < w.state_slots * hq; ++r) {
      *states += !std::isnan(st_host[r * stride + c.head_dim + 4]);  // its running max
    }
  }
  return dw.out.Download();
}

// A context of `len` positions laid out in whole chunks from `first_chunk` on, one span each.
InvSeq WholeChunks(int len, int first_chunk, int chunk_size) {
  InvSeq s;
  for (int p = 0, ch = first_chunk; p < len; p += chunk_size, ++ch) {
    s.chunk.push_back(ch);
    s.begin.push_back(0);
    s.end.push_back(std::min(chunk_size, len - p));
  }
  return s;
}

// The same positions, each span cut at random slots (as sharing or a prefill chunk cuts them).
InvSeq CutAtRandom(const InvSeq& whole, std::mt19937_64& rng) {
  InvSeq s = whole;
  s.chunk.clear();
  s.begin.clear();
  s.end.clear();
  for (size_t k = 0; k < whole.chunk.size(); ++k) {
    int b = whole.begin[k];
    while (b < whole.end[k]) {
      const int e = std::min<int>(whole.end[k], b + 1 + static_cast<int>(rng() % 23));
      s.chunk.push_back(whole.chunk[k]);
      s.begin.push_back(b);
      s.end.push_back(e);
      b = e;
    }
  }
  return s;
}

// The deterministic mode's attention: right against the CPU reference, and the same bits for a
// token (1) decoded as one row (its pieces in CTAs of their own, folded by the merge kernel) or
// prefilled among its sequence's new tokens (folded in the tile's CTA where they span several
// tiles), (2) over spans cut anywhere, (3) alone or after other sequences in the work list.
// Contexts reach 1,800 keys: up to four pieces. Every piece state the work list has is written.
TEST(CudaInvariantAttention, MatchesCpuAndIsBatchInvariant) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<Case> cases = {
      {128, 2, 4, 16, DType::kBf16}, {64, 1, 4, 64, DType::kBf16}, {8, 2, 4, 16, DType::kBf16},
      {128, 2, 2, 32, DType::kFp16}, {256, 1, 2, 64, DType::kBf16},
      {128, 2, 4, 32, DType::kBf16, true}, {64, 1, 4, 16, DType::kFp16, true},
      {128, 1, 8, 16, DType::kBf16},  // two warps of four heads per kv head
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(c));
    const int hq = c.kv_heads * c.gqa;
    const int64_t row_elems = int64_t{hq} * c.head_dim;
    const int len = 1 + static_cast<int>(rng() % 1800);
    const int chunks = (len + c.chunk_size - 1) / c.chunk_size;
    TestKv kv(c, chunks + 1 + 2048 / c.chunk_size, rng);
    const InvSeq whole = WholeChunks(len, 1, c.chunk_size);
    // The sequence's last num_q tokens, prefilled as one sequence over randomly cut spans, after
    // another sequence of random tokens; the queries of those tokens are the rows compared.
    const int num_q = 1 + static_cast<int>(rng() % std::min(len, 90));
    InvSeq prefill = CutAtRandom(whole, rng);
    prefill.pos0 = len - num_q;
    prefill.num_q = num_q;
    InvSeq other = WholeChunks(1 + static_cast<int>(rng() % 300), chunks + 1, c.chunk_size);
    other.num_q = 1 + static_cast<int>(rng() % 40);
    other.pos0 = static_cast<int32_t>(std::accumulate(other.end.begin(), other.end.end(), 0)) -
                 other.num_q;
    const std::vector<float> q_other = RandomRounded(c.dtype, other.num_q * row_elems, rng);
    const std::vector<float> q_new = RandomRounded(c.dtype, num_q * row_elems, rng);
    std::vector<float> q_batch = q_other;
    q_batch.insert(q_batch.end(), q_new.begin(), q_new.end());
    int64_t states = 0, slots = 0;
    const std::vector<uint16_t> batch =
        RunInvariant(c, kv, {other, prefill}, q_batch, {}, nullptr, &states, &slots);
    EXPECT_EQ(states, slots) << "piece states written of those the work list has";

    // The CPU reference over the whole-chunk layout.
    std::vector<float> want(q_new.size(), std::nanf(""));
    cpu::PrefillAttentionParams cp;
    cp.q = q_new.data();
    cp.out = want.data();
    cp.kv = kv.cpu;
    cp.span_chunk = whole.chunk.data();
    cp.span_begin = whole.begin.data();
    cp.span_end = whole.end.data();
    cp.num_spans = static_cast<int32_t>(whole.chunk.size());
    cp.q_pos0 = len - num_q;
    cp.num_q = num_q;
    cp.num_q_heads = hq;
    cp.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    cpu::PrefillAttention(cp);
    const std::vector<uint16_t> mine(batch.begin() + other.num_q * row_elems, batch.end());
    EXPECT_LT(RelErr(FromDtype(c.dtype, mine), want), Tolerance(c.dtype));

    // Each new token alone, decoded as a row over the whole-chunk spans: its pieces in CTAs of
    // their own and merged, and (no state buffer) folded in one CTA.
    int differ = 0, differ_folded = 0;
    for (int j = 0; j < num_q; ++j) {
      InvSeq row = whole;
      row.pos0 = len - num_q + j;
      row.num_q = 1;
      const std::vector<float> qj(q_new.begin() + j * row_elems, q_new.begin() + (j + 1) * row_elems);
      const std::vector<uint16_t> alone = RunInvariant(c, kv, {row}, qj);
      differ += !std::equal(alone.begin(), alone.end(), mine.begin() + j * row_elems);
      if (j % 8 == 0) {
        const std::vector<uint16_t> folded =
            RunInvariant(c, kv, {row}, qj, {}, nullptr, nullptr, nullptr, 0);
        differ_folded += !std::equal(folded.begin(), folded.end(), alone.begin());
      }
    }
    EXPECT_EQ(differ, 0) << "of " << num_q << " tokens differ between prefill in a batch and "
                         << "decode alone (context " << len << ")";
    EXPECT_EQ(differ_folded, 0) << "decode rows differ between pieces merged and folded";
  }
}

// The deterministic mode's shared-prefix read: decode rows of sequences sharing a prefix, its
// whole pieces read once for all of them (SharedPrefixMmaKernel) into each row's piece states,
// give the very bits of the same rows reading their whole contexts alone
// (which MatchesCpuAndIsBatchInvariant ties to the CPU reference and to each row alone); a
// prefill sequence in the same work list is untouched; a row's output has no NaN.
TEST(CudaInvariantAttention, SharedPrefixReadOnceKeepsEveryBit) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<Case> cases = {
      {128, 2, 4, 16, DType::kBf16}, {64, 1, 4, 64, DType::kBf16}, {128, 1, 8, 32, DType::kFp16},
      {128, 2, 4, 32, DType::kBf16, true}, {64, 2, 1, 16, DType::kFp16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(c));
    const int hq = c.kv_heads * c.gqa;
    const int64_t row_elems = int64_t{hq} * c.head_dim;
    const int prefix = kInvariantPieceKeys + static_cast<int>(rng() % 1200);
    const int members = 2 + static_cast<int>(rng() % 40);
    const int prefix_chunks = (prefix + c.chunk_size - 1) / c.chunk_size;
    const int tail_chunks = (150 + c.chunk_size) / c.chunk_size + 1;
    const int other_chunks = (300 + c.chunk_size - 1) / c.chunk_size;
    TestKv kv(c, 1 + prefix_chunks + members * tail_chunks + other_chunks, rng);
    // The shared prefix in chunks 1...: whole chunks, cut at random slots as sharing cuts them
    // (every member holds the same cut). A prefix that ends inside a chunk leaves the rest of
    // that chunk to no one: each member's tail starts in chunks of its own.
    const InvSeq shared = CutAtRandom(WholeChunks(prefix, 1, c.chunk_size), rng);
    std::vector<InvSeq> seqs;
    for (int i = 0; i < members; ++i) {
      const int tail = static_cast<int>(rng() % 150);  // private keys before the row's own
      InvSeq s = shared;
      const InvSeq own = WholeChunks(tail + 1, 1 + prefix_chunks + i * tail_chunks, c.chunk_size);
      s.chunk.insert(s.chunk.end(), own.chunk.begin(), own.chunk.end());
      s.begin.insert(s.begin.end(), own.begin.begin(), own.begin.end());
      s.end.insert(s.end.end(), own.end.begin(), own.end.end());
      s.pos0 = prefix + tail;
      s.num_q = 1;
      seqs.push_back(s);
    }
    // A prefill sequence of its own somewhere among them.
    InvSeq other = WholeChunks(1 + static_cast<int>(rng() % 300),
                               1 + prefix_chunks + members * tail_chunks, c.chunk_size);
    const int other_len = std::accumulate(other.end.begin(), other.end.end(), 0);
    other.num_q = std::min(other_len, 1 + static_cast<int>(rng() % 40));
    other.pos0 = other_len - other.num_q;
    const int at = static_cast<int>(rng() % (seqs.size() + 1));
    seqs.insert(seqs.begin() + at, other);
    std::vector<int32_t> member_ids;
    for (int i = 0; i <= members; ++i) {
      if (i != at) member_ids.push_back(i);
    }
    int rows = 0;
    for (const InvSeq& s : seqs) rows += s.num_q;
    const std::vector<float> q = RandomRounded(c.dtype, rows * row_elems, rng);
    const std::vector<uint16_t> per_row = RunInvariant(c, kv, seqs, q);
    int gtiles = 0;
    int64_t states = 0, slots = 0;
    const std::vector<uint16_t> grouped = RunInvariant(
        c, kv, seqs, q, {SharedPrefix{member_ids, prefix}}, &gtiles, &states, &slots);
    EXPECT_EQ(gtiles, (members * c.gqa + kPrefillBlockM - 1) / kPrefillBlockM *
                          (prefix / kInvariantPieceKeys));
    EXPECT_EQ(states, slots) << "piece states written of those the work list has";
    const std::vector<float> got = FromDtype(c.dtype, grouped);
    EXPECT_EQ(std::count_if(got.begin(), got.end(), [](float x) { return std::isnan(x); }), 0);
    int differ = 0;
    for (int r = 0; r < rows; ++r) {
      differ += !std::equal(per_row.begin() + r * row_elems,
                            per_row.begin() + (r + 1) * row_elems, grouped.begin() + r * row_elems);
    }
    EXPECT_EQ(differ, 0) << "of " << rows << " rows differ with the prefix of " << prefix
                         << " keys read once for " << members << " members";
  }
}

}  // namespace
}  // namespace banyan::kernels::cuda
