#include "kernels/cpu/tpp_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/check.h"

namespace banyan::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// logits[t] = (qi . k_t) * scale for the n K rows of d floats from `k` (a chunk's rows of one
// head are contiguous). Four rows at a time, each with its own sum that adds the products in the
// order of x, as one row at a time would: the same bits, in fewer passes over qi and less loop
// overhead (written so for clang 15, whose build of the one-row loop ran the bundled model's
// decode about 20 % slower than GCC 12's).
void Scores(const float* qi, const float* k, int n, int d, float scale, float* logits) {
  int t = 0;
  for (; t + 4 <= n; t += 4) {
    const float* k0 = k + static_cast<int64_t>(t) * d;
    const float* k1 = k0 + d;
    const float* k2 = k1 + d;
    const float* k3 = k2 + d;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int x = 0; x < d; ++x) {
      const float qx = qi[x];
      s0 += qx * k0[x];
      s1 += qx * k1[x];
      s2 += qx * k2[x];
      s3 += qx * k3[x];
    }
    logits[t] = s0 * scale;
    logits[t + 1] = s1 * scale;
    logits[t + 2] = s2 * scale;
    logits[t + 3] = s3 * scale;
  }
  for (; t < n; ++t) {
    const float* kt = k + static_cast<int64_t>(t) * d;
    float s = 0.0f;
    for (int x = 0; x < d; ++x) s += qi[x] * kt[x];
    logits[t] = s * scale;
  }
}

// Online-softmax attention of `num_q` queries (rows of `q`, stride q_stride floats) against the
// tokens of spans [span_lo, span_hi) for kv head `head`, reading at most `token_limit` tokens.
// Writes normalised outputs o[num_q][head_dim] and lse[num_q]. Each K/V row is loaded once per
// span for all queries (the matrix form of phase 1).
void Attend(const float* q, int64_t q_stride, int num_q, const KvView& kv, int head,
            const int32_t* span_chunk, const int32_t* span_begin, const int32_t* span_end,
            int span_lo, int span_hi, int64_t token_limit, float scale, float* o, float* lse,
            bool fixed_max = false) {
  const int d = kv.head_dim;
  // Scratch kept per thread: a decode step calls this per row and kv head of every layer.
  thread_local std::vector<float> m, l, logits, global_max;
  m.assign(num_q, kNegInf);
  l.assign(num_q, 0.0f);
  std::fill(o, o + static_cast<int64_t>(num_q) * d, 0.0f);
  logits.resize(kv.chunk_size);
  // Where span s ends within the first token_limit tokens, `seen` tokens read before it (no
  // begin + left: token_limit may be INT64_MAX).
  auto end_of = [&](int s, int64_t seen) {
    const int64_t left = token_limit - seen;
    return span_end[s] - span_begin[s] > left ? span_begin[s] + static_cast<int>(left)
                                              : span_end[s];
  };
  // fixed_max: each query's max over the whole context first; every block then uses it, so the
  // sums run token by token in the same order however the spans cut the context.
  if (fixed_max) {
    global_max.assign(num_q, kNegInf);
    int64_t seen_max = 0;
    for (int s = span_lo; s < span_hi && seen_max < token_limit; ++s) {
      const int begin = span_begin[s];
      const int end = end_of(s, seen_max);
      seen_max += end - begin;
      for (int i = 0; i < num_q; ++i) {
        Scores(q + i * q_stride, kv.K(span_chunk[s], head, begin), end - begin, d, scale,
               logits.data());
        for (int t = 0; t < end - begin; ++t) global_max[i] = std::max(global_max[i], logits[t]);
      }
    }
  }
  int64_t seen = 0;
  for (int s = span_lo; s < span_hi && seen < token_limit; ++s) {
    const int chunk = span_chunk[s];
    const int begin = span_begin[s];
    const int end = end_of(s, seen);
    seen += end - begin;
    for (int i = 0; i < num_q; ++i) {
      const float* qi = q + i * q_stride;
      Scores(qi, kv.K(chunk, head, begin), end - begin, d, scale, logits.data());
      float block_max = kNegInf;
      for (int t = 0; t < end - begin; ++t) block_max = std::max(block_max, logits[t]);
      if (block_max == kNegInf) continue;
      if (fixed_max) block_max = global_max[i];
      float new_m = std::max(m[i], block_max);
      float rescale = std::exp(m[i] - new_m);  // exp(-inf) == 0 on the first block
      float* oi = o + static_cast<int64_t>(i) * d;
      for (int x = 0; x < d; ++x) oi[x] *= rescale;
      l[i] *= rescale;
      for (int t = begin; t < end; ++t) {
        float pr = std::exp(logits[t - begin] - new_m);
        l[i] += pr;
        const float* v = kv.V(chunk, head, t);
        for (int x = 0; x < d; ++x) oi[x] += pr * v[x];
      }
      m[i] = new_m;
    }
  }
  for (int i = 0; i < num_q; ++i) {
    float* oi = o + static_cast<int64_t>(i) * d;
    if (l[i] > 0.0f) {
      float inv = 1.0f / l[i];
      for (int x = 0; x < d; ++x) oi[x] *= inv;
      lse[i] = m[i] + std::log(l[i]);
    } else {
      lse[i] = kNegInf;  // empty state: o stays 0
    }
  }
}

}  // namespace

void MergeState(float* o_a, float* lse_a, const float* o_b, float lse_b, int head_dim) {
  // max() keeps -inf only when both states are empty; then nothing changes, which avoids the
  // NaN of exp(-inf - -inf).
  float m = std::max(*lse_a, lse_b);
  if (m == kNegInf) return;
  float wa = std::exp(*lse_a - m);
  float wb = std::exp(lse_b - m);
  float sum = wa + wb;
  for (int x = 0; x < head_dim; ++x) o_a[x] = (o_a[x] * wa + o_b[x] * wb) / sum;
  *lse_a = m + std::log(sum);
}

void TppDecodeAttention(const DecodeAttentionParams& p) {
  const KvView& kv = p.kv;
  const PlanView& plan = p.plan;
  const int d = kv.head_dim;
  const int hq = p.num_q_heads;
  BANYAN_CHECK(hq % kv.num_kv_heads == 0) << hq << " q heads, " << kv.num_kv_heads << " kv heads";
  const int g = hq / kv.num_kv_heads;
  const int64_t row_stride = static_cast<int64_t>(hq) * d;

  // Phase 1: one (rows x g) query matrix per segment and kv head.
  std::vector<float> qbuf, obuf, lbuf;
  for (int s = 0; s < plan.num_segments; ++s) {
    const int r0 = plan.seg_row_begin[s];
    const int nr = plan.seg_row_end[s] - r0;
    const int m = nr * g;
    qbuf.resize(static_cast<size_t>(m) * d);
    obuf.resize(static_cast<size_t>(m) * d);
    lbuf.resize(m);
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      for (int r = 0; r < nr; ++r) {
        const float* src = p.q + (r0 + r) * row_stride + static_cast<int64_t>(h) * g * d;
        std::copy(src, src + g * d, qbuf.data() + static_cast<size_t>(r) * g * d);
      }
      Attend(qbuf.data(), d, m, kv, h, plan.span_chunk, plan.span_begin, plan.span_end,
             plan.seg_span_begin[s], plan.seg_span_end[s], INT64_MAX, p.scale, obuf.data(),
             lbuf.data());
      for (int r = 0; r < nr; ++r) {
        const int64_t part = plan.seg_partial_offset[s] + r;
        for (int k = 0; k < g; ++k) {
          const int qh = h * g + k;
          std::copy(obuf.data() + (static_cast<size_t>(r) * g + k) * d,
                    obuf.data() + (static_cast<size_t>(r) * g + k + 1) * d,
                    p.partial_o + (part * hq + qh) * d);
          p.partial_lse[part * hq + qh] = lbuf[r * g + k];
        }
      }
    }
  }

  // Phase 2: private spans per row (its g heads of a kv head together), then merge partials.
  std::vector<float> lse(g);
  for (int r = 0; r < plan.num_rows; ++r) {
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      const int64_t base = r * row_stride + static_cast<int64_t>(h) * g * d;
      Attend(p.q + base, d, g, kv, h, plan.span_chunk, plan.span_begin, plan.span_end,
             plan.row_span_begin[r], plan.row_span_end[r], INT64_MAX, p.scale, p.out + base,
             lse.data(), p.fixed_max);
      for (int i = plan.row_seg_begin[r]; i < plan.row_seg_end[r]; ++i) {
        const int s = plan.row_seg_ids[i];
        const int64_t part = plan.seg_partial_offset[s] + (r - plan.seg_row_begin[s]);
        for (int k = 0; k < g; ++k) {
          const int qh = h * g + k;
          MergeState(p.out + base + static_cast<int64_t>(k) * d, &lse[k],
                     p.partial_o + (part * hq + qh) * d, p.partial_lse[part * hq + qh], d);
        }
      }
    }
  }
}

void PagedDecodeAttention(const DecodeAttentionParams& p) {
  BANYAN_CHECK(p.plan.num_segments == 0) << "the paged kernel takes a plan without sharing";
  const int d = p.kv.head_dim;
  const int g = p.num_q_heads / p.kv.num_kv_heads;
  const int64_t row_stride = static_cast<int64_t>(p.num_q_heads) * d;
  std::vector<float> lse(g);
  for (int r = 0; r < p.plan.num_rows; ++r) {
    for (int h = 0; h < p.kv.num_kv_heads; ++h) {
      const int64_t base = r * row_stride + static_cast<int64_t>(h) * g * d;
      Attend(p.q + base, d, g, p.kv, h, p.plan.span_chunk, p.plan.span_begin, p.plan.span_end,
             p.plan.row_span_begin[r], p.plan.row_span_end[r], INT64_MAX, p.scale,
             p.out + base, lse.data(), p.fixed_max);
    }
  }
}

void PrefillAttention(const PrefillAttentionParams& p) {
  const int d = p.kv.head_dim;
  const int g = p.num_q_heads / p.kv.num_kv_heads;
  const int64_t row_stride = static_cast<int64_t>(p.num_q_heads) * d;
  std::vector<float> lse(g);
  for (int j = 0; j < p.num_q; ++j) {
    for (int h = 0; h < p.kv.num_kv_heads; ++h) {
      const int64_t base = j * row_stride + static_cast<int64_t>(h) * g * d;
      Attend(p.q + base, d, g, p.kv, h, p.span_chunk, p.span_begin, p.span_end, 0, p.num_spans,
             static_cast<int64_t>(p.q_pos0) + j + 1, p.scale, p.out + base, lse.data(),
             p.fixed_max);
    }
  }
}

}  // namespace banyan::kernels::cpu
