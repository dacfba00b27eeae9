// A step's inputs and attention work on the host: flattening and checking the batch, the TPP
// work plan, the prefill work list, and the key of the step's CUDA graph.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "engine/cuda/cuda_backend_impl.h"
#include "engine/plan_view.h"

namespace banyan::engine {


int DecodeRowBucket(int rows) {
  const int step = rows <= 64 ? 8 : rows <= 256 ? 16 : rows <= 1024 ? 32 : 64;
  return (rows + step - 1) / step * step;
}

absl::Status CudaBackend::PrepareTpp(const kvcache::AttentionPlan& plan) {
  namespace tpp = kc::tpp;
  Impl& m = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  if (m.tpp_plan.has_value() && plan.build_id != 0 && plan.build_id == m.tpp_plan_build_id) {
    // The plan was only advanced (AttentionPlan::build_id): span ends moved. Patch them and
    // upload that range of the image.
    tpp::TppWorkPlan& wp = *m.tpp_plan;
    BANYAN_CHECK(wp.num_rows() == plan.num_rows())
        << "plan " << plan.build_id << " changed its rows without a rebuild";
    wp.UpdateSpanEnds(plan.span_end.data());
    const size_t off = wp.span_end_offset_bytes(), n = wp.span_end_bytes();
    if (n > 0) {
      char* host = m.tpp_host_image.as<char>();
      std::memcpy(host + off, reinterpret_cast<const char*>(wp.image().data()) + off, n);
      BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.tpp_image.as<char>() + off, host + off, n,
                                                  cudaMemcpyHostToDevice, m.stream));
    }
    ++stats_.tpp_plan_updates;
    stats_.update_upload_bytes += static_cast<int64_t>(n);
    stats_.update_host_us += MicrosSince(t0);
    return absl::OkStatus();
  }
  m.tpp_plan.reset();
  m.tpp_plan_build_id = 0;
  tpp::TppProblem problem;
  problem.num_q_heads = cfg_.n_heads;
  problem.num_kv_heads = cfg_.n_kv_heads;
  problem.head_dim = cfg_.head_dim();
  problem.chunk_size = options_.chunk_size;
  tpp::TppOptions topt = options_.tpp;
  topt.num_sms = m.num_sms;
  absl::StatusOr<tpp::TppWorkPlan> built = tpp::TppWorkPlan::Build(ViewOf(plan), problem, topt);
  if (!built.ok()) return built.status();
  const int64_t bytes = static_cast<int64_t>(built->image_bytes());
  const int64_t ws = static_cast<int64_t>(built->workspace_bytes());
  // Growing reallocates, and cudaFree waits for the device, i.e. for the layer-0 work queued
  // before this point (docs/gpu.md, "TPP in the backend"). So grow with headroom:
  // a quarter, and for the workspace room for one more partial state per row, which is what the
  // plan needs when its schedule switches from fused to deferred merge as private tails grow.
  if (bytes > m.tpp_image.capacity()) {
    BANYAN_RETURN_IF_ERROR(m.tpp_image.Reserve(bytes + bytes / 4, "TPP work plan"));
  }
  BANYAN_RETURN_IF_ERROR(m.tpp_host_image.Reserve(bytes, "TPP work plan (host)"));
  if (ws > m.tpp_workspace.capacity()) {
    const int64_t per_row = int64_t{cfg_.n_heads} * (cfg_.head_dim() + 1) * 4;
    const int64_t want = ws + int64_t{built->num_rows()} * per_row + 512;
    BANYAN_RETURN_IF_ERROR(m.tpp_workspace.Reserve(want + want / 4, "TPP partial states"));
  }
  std::memcpy(m.tpp_host_image.get(), built->image().data(), static_cast<size_t>(bytes));
  BANYAN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.tpp_image.get(), m.tpp_host_image.get(),
                                              static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                              m.stream));
  m.tpp_plan = std::move(*built);
  ++m.tpp_plan_generation;
  m.tpp_plan_build_id = plan.build_id;
  ++stats_.tpp_plan_builds;
  stats_.build_upload_bytes += bytes;
  stats_.build_host_us += MicrosSince(t0);
  return absl::OkStatus();
}

absl::Status CudaBackend::PrepareInputs(const StepBatch& batch, int32_t samples,
                                        std::span<const int32_t> feed, StepInputs* in) {
  Impl& m = *impl_;
  const model::ModelConfig& c = cfg_;
  const int dim = c.dim, d = c.head_dim(), hq = c.n_heads, hkv = c.n_kv_heads;
  const int hidden = c.hidden_dim, vocab = c.vocab_size;
  const int qkv_cols = (hq + 2 * hkv) * d;
  const int64_t es = kc::DTypeBytes(options_.dtype);
  if (!batch.decode.empty() &&
      (batch.plan == nullptr || batch.plan->num_rows() != static_cast<int>(batch.decode.size()))) {
    return absl::InvalidArgumentError("decode rows and attention plan disagree");
  }

  // ---- flatten the step's tokens: decode rows first, then prefill tokens.
  auto add_work = [&](const SeqWork& s) -> absl::Status {
    if (s.tokens.empty() || s.slots.size() != s.tokens.size() ||
        s.write_kv.size() != s.tokens.size()) {
      return absl::InvalidArgumentError("a sequence's tokens, slots and write flags disagree");
    }
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      if (s.tokens[i] < 0 || s.tokens[i] >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", s.tokens[i], " outside the vocabulary of ", vocab));
      }
      if (s.slots[i].chunk < 0 || s.slots[i].chunk >= num_chunks_ || s.slots[i].slot < 0 ||
          s.slots[i].slot >= options_.chunk_size) {
        return absl::InvalidArgumentError(absl::StrCat("slot (", s.slots[i].chunk, ", ",
                                                       s.slots[i].slot, ") outside the KV pool"));
      }
      in->tokens.push_back(s.tokens[i]);
      in->positions.push_back(s.pos0 + static_cast<int32_t>(i));
      in->slot_chunk.push_back(s.slots[i].chunk);
      in->slot_index.push_back(s.slots[i].slot);
      in->writes.push_back(s.write_kv[i] ? 1 : 0);
    }
    if (s.want_logits) in->logit_rows.push_back(static_cast<int32_t>(in->tokens.size()) - 1);
    return absl::OkStatus();
  };
  for (const SeqWork& s : batch.decode) BANYAN_RETURN_IF_ERROR(add_work(s));
  in->num_decode = static_cast<int>(in->tokens.size());
  for (const SeqWork& s : batch.prefill) {
    const int32_t q_row = static_cast<int32_t>(in->tokens.size());
    BANYAN_RETURN_IF_ERROR(add_work(s));
    if (s.span_chunk.size() != s.span_begin.size() || s.span_chunk.size() != s.span_end.size()) {
      return absl::InvalidArgumentError("a prefill sequence's span arrays disagree");
    }
    int64_t span_tokens = 0;
    for (size_t k = 0; k < s.span_chunk.size(); ++k) {
      if (s.span_chunk[k] < 0 || s.span_chunk[k] >= num_chunks_ || s.span_begin[k] < 0 ||
          s.span_end[k] > options_.chunk_size || s.span_begin[k] > s.span_end[k]) {
        return absl::InvalidArgumentError("a prefill span lies outside the KV pool");
      }
      span_tokens += s.span_end[k] - s.span_begin[k];
    }
    if (span_tokens < s.pos0 + static_cast<int64_t>(s.tokens.size())) {
      return absl::InvalidArgumentError(absl::StrCat("a prefill sequence's spans hold ",
                                                     span_tokens, " tokens, it needs ",
                                                     s.pos0 + s.tokens.size()));
    }
    in->prefill_seqs.push_back(kc::PrefillSeq{s.span_chunk, s.span_begin, s.span_end, s.pos0,
                                              static_cast<int32_t>(s.tokens.size()), q_row});
  }
  in->n_real_out = static_cast<int>(in->logit_rows.size());
  if (options_.pad_decode_rows && batch.prefill.empty() && in->num_decode > 0) {
    // Padding rows: token 0 at position 0, no KV write, no attention (the plan has only the real
    // rows; their attention output rows are never read back), logits computed and ignored.
    const int rows = DecodeRowBucket(in->num_decode);
    for (int r = in->num_decode; r < rows; ++r) {
      in->tokens.push_back(0);
      in->positions.push_back(0);
      in->slot_chunk.push_back(0);
      in->slot_index.push_back(0);
      in->writes.push_back(0);
      in->logit_rows.push_back(r);
    }
  }
  const int T = in->T = static_cast<int>(in->tokens.size());
  const int n_out = in->n_out = static_cast<int>(in->logit_rows.size());
  // Decode rows through the TPP kernels (a plan without segments runs their paged call).
  in->use_tpp = m.tpp && in->num_decode > 0 && !options_.batch_invariant;
  if (T == 0) return absl::OkStatus();

  // ---- workspace. The FP8 GEMMs may run on a few padding rows past T (Fp8Gemm::RowsFor): the
  // buffers they read and write (x, scratch, act8) have room for them.
  const int64_t rows8 = m.weights.fp8() ? cuda::Fp8Gemm::RowsFor(*m.weights.fp8(), T) : T;
  BANYAN_RETURN_IF_ERROR(m.x.Reserve(rows8 * dim * 4, "activations"));
  BANYAN_RETURN_IF_ERROR(m.xb.Reserve(int64_t{T} * dim * es, "activations"));
  BANYAN_RETURN_IF_ERROR(m.q.Reserve(int64_t{T} * hq * d * es, "queries"));
  BANYAN_RETURN_IF_ERROR(m.att.Reserve(int64_t{T} * hq * d * es, "attention output"));
  BANYAN_RETURN_IF_ERROR(
      m.scratch.Reserve(rows8 * std::max(qkv_cols, 2 * hidden) * 4, "GEMM outputs"));
  BANYAN_RETURN_IF_ERROR(m.h.Reserve(int64_t{T} * hidden * es, "MLP activations"));
  if (m.weights.fp8()) {
    const int64_t widest = std::max({int64_t{dim}, int64_t{hq} * d, int64_t{hidden}});
    BANYAN_RETURN_IF_ERROR(m.act8.Reserve(rows8 * widest, "FP8 activations"));
    BANYAN_RETURN_IF_ERROR(
        m.act8_scales.Reserve(rows8 * ((widest + 127) / 128) * 4, "FP8 activation scales"));
  }
  BANYAN_RETURN_IF_ERROR(m.xo.Reserve(std::max(1, n_out) * int64_t{dim} * es, "final norm"));
  BANYAN_RETURN_IF_ERROR(m.logits.Reserve(std::max(1, n_out) * int64_t{vocab} * 4, "logits"));
  if (!feed.empty()) {
    // Fed rows read the tokens the step just before left in out_tokens.
    if (feed.size() != batch.decode.size()) {
      return absl::InvalidArgumentError("a fed step has one feed entry per decode row");
    }
    if (!m.feedable_valid) {
      return absl::FailedPreconditionError("fed rows need the tokens of a step just before");
    }
    for (int32_t f : feed) {
      if (f >= m.feedable_count) {
        return absl::InvalidArgumentError(absl::StrCat("fed row reads token ", f, " of ",
                                                       m.feedable_count));
      }
    }
  }
  if (samples > 0) {
    const void* before = m.out_tokens.get();
    BANYAN_RETURN_IF_ERROR(m.out_tokens.Reserve(std::max(1, samples) * 4, "sampled tokens"));
    if (!feed.empty() && m.out_tokens.get() != before) {
      return absl::FailedPreconditionError("a fed step has more rows than the step it reads");
    }
  }

  m.step_ints.Clear();
  in->o_tokens = m.step_ints.Add(in->tokens);
  in->o_pos = m.step_ints.Add(in->positions);
  in->o_chunk = m.step_ints.Add(in->slot_chunk);
  in->o_slot = m.step_ints.Add(in->slot_index);
  in->o_write = m.step_ints.Add(in->writes);
  in->o_rows = m.step_ints.Add(in->logit_rows);
  if (!feed.empty()) {
    // One entry per token of the step: the decode rows' (they come first), -1 for the rest.
    m.feed_rows.assign(static_cast<size_t>(T), -1);
    std::copy(feed.begin(), feed.end(), m.feed_rows.begin());
    in->o_feed = m.step_ints.Add(m.feed_rows);
  }
  return m.step_ints.Upload(m.stream, "step inputs");
}

absl::Status CudaBackend::InvariantSeqs(const StepBatch& batch, const StepInputs& in) {
  Impl& m = *impl_;
  m.invariant_chunk.clear();
  m.invariant_begin.clear();
  m.invariant_end.clear();
  m.invariant_seqs.clear();
  std::vector<size_t>& first = m.invariant_first;  // kept: no allocation per step
  first.assign(static_cast<size_t>(in.num_decode) + 1, 0);
  if (in.num_decode > 0) {
    const kvcache::AttentionPlan& plan = *batch.plan;
    auto add = [&](int32_t lo, int32_t hi) {
      for (int32_t s = lo; s < hi; ++s) {
        m.invariant_chunk.push_back(plan.span_chunk[s]);
        m.invariant_begin.push_back(plan.span_begin[s]);
        m.invariant_end.push_back(plan.span_end[s]);
      }
    };
    for (int r = 0; r < in.num_decode; ++r) {
      for (int32_t i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
        const int32_t seg = plan.row_seg_ids[i];
        add(plan.seg_span_begin[seg], plan.seg_span_end[seg]);
      }
      add(plan.row_span_begin[r], plan.row_span_end[r]);
      first[r + 1] = m.invariant_chunk.size();
    }
  }
  for (int r = 0; r < in.num_decode; ++r) {
    const size_t lo = first[r], n = first[r + 1] - first[r];
    const int32_t pos = batch.decode[r].pos0;
    int64_t held = 0;
    for (size_t k = lo; k < lo + n; ++k) held += m.invariant_end[k] - m.invariant_begin[k];
    if (held < int64_t{pos} + 1) {
      return absl::InvalidArgumentError(absl::StrCat("decode row ", r, " at position ", pos,
                                                     ": its plan holds ", held, " tokens"));
    }
    m.invariant_seqs.push_back(kc::PrefillSeq{
        std::span<const int32_t>(m.invariant_chunk).subspan(lo, n),
        std::span<const int32_t>(m.invariant_begin).subspan(lo, n),
        std::span<const int32_t>(m.invariant_end).subspan(lo, n), pos, 1, r});
  }
  m.invariant_seqs.insert(m.invariant_seqs.end(), in.prefill_seqs.begin(), in.prefill_seqs.end());
  return absl::OkStatus();
}

namespace {

// The deterministic mode's shared-prefix groups: decode rows by the deepest segment of their
// plan (a row's segments are its path down the prefix tree, root first, and InvariantSeqs puts
// their spans first), each group sharing the positions of that segment and its ancestors.
void InvariantGroups(const kvcache::AttentionPlan& plan, int32_t num_decode,
                     std::vector<kc::SharedPrefix>* groups) {
  groups->clear();
  std::vector<int32_t> group_of(plan.seg_tokens.size(), -1);
  for (int32_t r = 0; r < num_decode; ++r) {
    const int32_t lo = plan.row_seg_begin[r], hi = plan.row_seg_end[r];
    if (lo == hi) continue;
    int32_t positions = 0;
    for (int32_t i = lo; i < hi; ++i) positions += plan.seg_tokens[plan.row_seg_ids[i]];
    int32_t& g = group_of[plan.row_seg_ids[hi - 1]];
    if (g < 0) {
      g = static_cast<int32_t>(groups->size());
      groups->push_back(kc::SharedPrefix{{}, positions});
    }
    (*groups)[g].seqs.push_back(r);  // decode row r is sequence r of the work list
  }
}

}  // namespace

absl::Status CudaBackend::PrepareAttention(const StepBatch& batch, const StepInputs& in,
                                           bool fixed_layout) {
  Impl& m = *impl_;
  const int d = cfg_.head_dim(), hq = cfg_.n_heads, hkv = cfg_.n_kv_heads;
  const kc::DType dt = options_.dtype;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  AttentionArgs& a = m.attn;
  a = {};
  if (options_.attention == AttentionMode::kNone) return absl::OkStatus();
  // With a fixed layout every table gets a power-of-two capacity, so offsets inside attn_ints
  // (and so the graph's kernel arguments) only move when a table outgrows its bucket.
  auto add = [&](const std::vector<int32_t>& v) {
    return fixed_layout ? m.attn_ints.Add(v, RoundUpPow2(static_cast<int64_t>(v.size())))
                        : m.attn_ints.Add(v);
  };
  m.attn_ints.Clear();
  a.use_tpp = in.use_tpp;
  const bool invariant = options_.batch_invariant;
  a.prefill = !in.prefill_seqs.empty() || (invariant && in.num_decode > 0);
  if (a.use_tpp) {
    BANYAN_RETURN_IF_ERROR(PrepareTpp(*batch.plan));
    const kc::tpp::TppWorkPlan& wp = *m.tpp_plan;
    if (wp.num_segments() > 0) ++stats_.tpp_steps;
    stats_.last_segments = wp.num_segments();
    stats_.last_p1_items = wp.num_p1_items();
    stats_.last_p2_items = wp.num_p2_items();
    stats_.last_merge_rows = wp.num_merge_rows();
    stats_.last_deferred_merge = wp.deferred_merge();
    kc::tpp::TppRunArgs& ta = a.ta;
    ta.q = m.q.get();
    ta.out = m.att.get();
    ta.dtype = dt;
    ta.scale = scale;
    ta.image = m.tpp_image.as<int32_t>();
    ta.workspace = m.tpp_workspace.get();
    ta.side_stream = m.side_stream;
    ta.fork_event = m.fork_event;
    ta.join_event = m.join_event;
    // Layer 0's KV view: each layer's launch puts in its own base; its format (16-bit or FP8, the
    // same in every layer) is what picks the kernels, here and in UpdateAttentionNodes.
    ta.kv = m.kv0;
  }
  int64_t op[23] = {};
  if (a.prefill) {
    if (invariant) {
      BANYAN_RETURN_IF_ERROR(InvariantSeqs(batch, in));
      kc::BuildPrefillWork(m.invariant_seqs, hq / hkv, kc::kPrefillBlockM, &m.prefill_work);
      if (kc::HasFastAttentionPath(d)) {
        // Piece states up to 256 MiB (groups and rows past that read their keys in one CTA each:
        // the same bits).
        const int64_t max_slots = (int64_t{256} << 20) / (int64_t{hq} * kc::PrefillStateStride(d) * 4);
        kc::PrefillWork& w = m.prefill_work;
        if (in.num_decode > 0) {
          InvariantGroups(*batch.plan, in.num_decode, &m.invariant_groups);
          if (!m.invariant_groups.empty()) {
            kc::AddSharedPrefixGroups(m.invariant_groups, hq / hkv, max_slots, &w);
          }
        }
        kc::AddInvariantPieces(hq / hkv, max_slots, &w);
        // A captured step's grids stay put while rows cross piece boundaries: items, group tiles
        // and merged sequences padded to powers of two with empty ones (-1).
        if (fixed_layout) {
          const auto pad = [](std::vector<int32_t>& v) {
            v.resize(static_cast<size_t>(RoundUpPow2(static_cast<int64_t>(v.size()))), -1);
          };
          pad(w.item_tile);
          pad(w.item_piece);
          if (w.num_merge() > 0) pad(w.merge_seq);
          if (w.num_gtiles() > 0) {
            pad(w.gtile_group);
            pad(w.gtile_m0);
            pad(w.gtile_piece);
          }
        }
      }
    } else {
      kc::BuildPrefillWork(in.prefill_seqs, hq / hkv, kc::PrefillTileRows(m.kv0), &m.prefill_work);
    }
    const kc::PrefillWork& w = m.prefill_work;
    op[0] = add(w.span_chunk);
    op[1] = add(w.span_begin);
    op[2] = add(w.span_end);
    op[3] = add(w.span_pos);
    op[4] = add(w.seq_span_begin);
    op[5] = add(w.seq_span_end);
    op[6] = add(w.seq_pos0);
    op[7] = add(w.seq_num_q);
    op[8] = add(w.seq_q_row);
    op[9] = add(w.tile_seq);
    op[10] = add(w.tile_m0);
    op[11] = add(w.token_seq);
    if (w.num_items() > 0) {
      op[12] = add(w.item_tile);
      op[13] = add(w.item_piece);
      op[14] = add(w.seq_pieces);
      op[15] = add(w.seq_state);
      op[16] = add(w.merge_seq);
      if (w.state_slots > 0) {
        // A power of two: the buffer (a captured step's argument) moves seldom as contexts grow.
        BANYAN_RETURN_IF_ERROR(m.invariant_state.Reserve(
            RoundUpPow2(w.state_slots * hq * kc::PrefillStateStride(d) * 4),
            "attention piece states"));
      }
    }
    if (w.num_gtiles() > 0) {
      op[17] = add(w.grp_first);
      op[18] = add(w.grp_count);
      op[19] = add(w.grp_members);
      op[20] = add(w.gtile_group);
      op[21] = add(w.gtile_m0);
      op[22] = add(w.gtile_piece);
      ++stats_.invariant_shared_steps;
      stats_.invariant_shared_rows += static_cast<int64_t>(w.grp_members.size());
    }
  }
  BANYAN_RETURN_IF_ERROR(m.attn_ints.Upload(m.stream, "attention work"));
  if (a.prefill) {
    const kc::PrefillWork& w = m.prefill_work;
    kc::PrefillParams& pp = a.pp;
    pp.q = m.q.get();
    pp.out = m.att.get();
    pp.span_chunk = m.attn_ints.Dev(op[0]);
    pp.span_begin = m.attn_ints.Dev(op[1]);
    pp.span_end = m.attn_ints.Dev(op[2]);
    pp.span_pos = m.attn_ints.Dev(op[3]);
    pp.seq_span_begin = m.attn_ints.Dev(op[4]);
    pp.seq_span_end = m.attn_ints.Dev(op[5]);
    pp.seq_pos0 = m.attn_ints.Dev(op[6]);
    pp.seq_num_q = m.attn_ints.Dev(op[7]);
    pp.seq_q_row = m.attn_ints.Dev(op[8]);
    pp.tile_seq = m.attn_ints.Dev(op[9]);
    pp.tile_m0 = m.attn_ints.Dev(op[10]);
    pp.token_seq = m.attn_ints.Dev(op[11]);
    if (w.num_items() > 0) {
      pp.item_tile = m.attn_ints.Dev(op[12]);
      pp.item_piece = m.attn_ints.Dev(op[13]);
      pp.seq_pieces = m.attn_ints.Dev(op[14]);
      pp.seq_state = m.attn_ints.Dev(op[15]);
      pp.merge_seq = m.attn_ints.Dev(op[16]);
      pp.num_items = w.num_items();
      pp.num_fold_items = w.num_fold_items;
      pp.num_merge = w.num_merge();
      if (w.state_slots > 0) pp.state = m.invariant_state.as<float>();
    }
    if (w.num_gtiles() > 0) {
      pp.grp_first = m.attn_ints.Dev(op[17]);
      pp.grp_count = m.attn_ints.Dev(op[18]);
      pp.grp_members = m.attn_ints.Dev(op[19]);
      pp.gtile_group = m.attn_ints.Dev(op[20]);
      pp.gtile_m0 = m.attn_ints.Dev(op[21]);
      pp.gtile_piece = m.attn_ints.Dev(op[22]);
      pp.num_gtiles = w.num_gtiles();
    }
    pp.num_tiles = w.num_tiles();
    pp.block_m = w.block_m;
    pp.num_tokens = w.num_tokens;
    pp.q_row_begin = w.q_row_begin;
    pp.num_q_heads = hq;
    pp.scale = scale;
  }
  return absl::OkStatus();
}

cuda::DecodeGraphKey CudaBackend::GraphKey(const StepInputs& in) const {
  const Impl& m = *impl_;
  const AttentionArgs& a = m.attn;
  cuda::DecodeGraphKey k;
  k.shape = {in.T, in.n_out, a.use_tpp ? 1 : 0, in.o_feed >= 0 ? 1 : 0};
  k.early_launch = in.T <= options_.graph_early_launch_rows;  // T is part of the shape
  auto ptr = [](const void* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)); };
  // Buffers a launch points into (they move when they grow); the step_ints offsets follow from
  // T and n_out.
  k.params = {ptr(m.x.get()),       ptr(m.xb.get()),      ptr(m.q.get()),
              ptr(m.att.get()),     ptr(m.scratch.get()), ptr(m.h.get()),
              ptr(m.xo.get()),      ptr(m.logits.get()),  ptr(m.step_ints.Dev(0))};
  // Fed rows read out_tokens.
  if (in.o_feed >= 0) k.params.push_back(ptr(m.out_tokens.get()));
  if (a.prefill) {
    // The deterministic mode's decode-only steps (the only graphed steps with the prefill
    // kernels): every argument of InvariantAttention's launches that is not an uploaded table's
    // contents. Tables keep their places (fixed layout) until one outgrows its bucket.
    const kc::PrefillParams& pp = a.pp;
    const void* tables[] = {pp.span_chunk,  pp.span_begin,     pp.span_end,   pp.span_pos,
                            pp.seq_span_begin, pp.seq_span_end, pp.seq_pos0,  pp.seq_num_q,
                            pp.seq_q_row,   pp.tile_seq,       pp.tile_m0,    pp.token_seq,
                            pp.item_tile,   pp.item_piece,     pp.seq_pieces, pp.seq_state,
                            pp.merge_seq,   pp.grp_first,      pp.grp_count,  pp.grp_members,
                            pp.gtile_group, pp.gtile_m0,       pp.gtile_piece, pp.state};
    for (const void* t : tables) k.params.push_back(ptr(t));
    k.params.insert(k.params.end(), {pp.num_items, pp.num_fold_items, pp.num_merge, pp.num_gtiles, pp.num_tiles,
                                     pp.block_m, pp.num_tokens, pp.q_row_begin, pp.num_q_heads});
  }
  if (a.use_tpp) {
    // Which kernels run and how is the launch signature; the plan's geometry (grids, the image's
    // table offsets, the partial states) is what UpdateAttentionNodes moves: every build counts
    // as a change, so nothing the plan may add later can be missed.
    const std::vector<int64_t> sig = kc::tpp::TppLaunchSignature(*m.tpp_plan, a.ta);
    k.params.insert(k.params.end(), sig.begin(), sig.end());
    k.patch = {ptr(a.ta.image), ptr(a.ta.workspace), m.tpp_plan_generation};
  }
  return k;
}

absl::Status CudaBackend::UpdateAttentionNodes(const std::vector<kc::KernelNode>& kernels,
                                               cudaGraphExec_t exec, int* nodes) {
  Impl& m = *impl_;
  const AttentionArgs& a = m.attn;
  std::vector<kc::KernelNodeUpdate> updates;
  if (a.use_tpp) {
    BANYAN_RETURN_IF_ERROR(kc::tpp::TppNodeUpdates(*m.tpp_plan, a.ta, &updates));
  }
  BANYAN_RETURN_IF_ERROR(kc::ApplyKernelNodeUpdates(kernels, exec, updates, nodes));
  // Every layer launches each listed kernel once: anything else means the graph holds
  // attention nodes these updates do not describe, and replaying it would be wrong.
  const int want = static_cast<int>(updates.size()) * cfg_.n_layers;
  if (*nodes != want) {
    return absl::InternalError(absl::StrCat("graph update changed ", *nodes,
                                            " attention nodes, expected ", want));
  }
  return absl::OkStatus();
}

}  // namespace banyan::engine
