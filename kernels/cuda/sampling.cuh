// The sampling kernel behind sampling.h: one block of BLOCK threads per sample. The header says
// what is computed; this file says how, pass by pass. Every pass reads the row from global memory
// (L2 mostly: a 128K row is 512 KiB, more than shared memory holds).
#pragma once

#include <cfloat>
#include <climits>
#include <cstdint>

#include "common/philox.h"
#include "kernels/cuda/sampling.h"

namespace banyan::kernels::cuda::sampling {

// Pivots per pass of a threshold search: the key range shrinks 16-fold per pass, so a 32-bit key
// range takes 8 passes (a binary search would take 32).
inline constexpr int kPivots = 15;
inline constexpr uint32_t kKeyNegInf = 0x007fffffu;  // OrderKey(-inf)

// NaN can never be sampled (step 1).
__device__ __forceinline__ float Sanitized(float x) { return isnan(x) ? -INFINITY : x; }

// A monotone map of non-NaN floats to uint32: a < b <=> key(a) < key(b), so thresholds can be
// searched over integers. -0 is mapped as +0: the CPU compares them equal, so they must tie.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float FromKey(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) != 0 ? (k & 0x7fffffffu) : ~k);
}

// w(z) of step 5, with the CPU's float operations in the CPU's order (no contraction); expf is
// the only source of difference (a few ulp).
struct Weight {
  float zmax;
  float temperature;
  __device__ __forceinline__ float operator()(float z) const {
    if (zmax == INFINITY) return z == INFINITY ? 1.0f : 0.0f;
    return expf(__fdiv_rn(__fsub_rn(z, zmax), temperature));
  }
};

// log_softmax of the raw logits (step 2), the +inf limit included.
struct LogSoftmax {
  float max;
  double log_mass;  // log(sum exp(x - max)); log(#{x = +inf}) when max = +inf
  __device__ __forceinline__ float LogProb(float x) const {
    if (max == INFINITY) return x == INFINITY ? static_cast<float>(-log_mass) : -INFINITY;
    return static_cast<float>(static_cast<double>(x) - max - log_mass);
  }
};

// One pass's summary of a row: the max with its lowest id, the smallest value above -inf, and
// counts of the values above -inf and at +inf.
struct RowStats {
  float max = -INFINITY;
  int argmax = INT_MAX;
  float min = INFINITY;
  int n_cand = 0;
  int n_inf = 0;

  __device__ __forceinline__ void TakeMax(float v, int i) {
    if (v > max || (v == max && i < argmax)) {
      max = v;
      argmax = i;
    }
  }
  __device__ __forceinline__ void Add(float x, int i) {
    TakeMax(x, i);
    if (x > -INFINITY) {
      min = fminf(min, x);
      ++n_cand;
    }
    if (x == INFINITY) ++n_inf;
  }
  __device__ __forceinline__ void Merge(const RowStats& o) {
    TakeMax(o.max, o.argmax);
    min = fminf(min, o.min);
    n_cand += o.n_cand;
    n_inf += o.n_inf;
  }
};

// Counts and mass of a row against a threshold key t (CountAt).
struct Threshold {
  int n_gt = 0;         // key > t
  double mass_gt = 0;   // sum of w over key > t (when asked)
};

template <int BLOCK>
struct Shared {
  static constexpr int kWarps = BLOCK / 32;
  double red[kWarps * kPivots];
  int ired[kWarps * kPivots];
  RowStats stats[kWarps];
  // Ties at the current threshold in the warp-range layout: the number of ties in the ranges of
  // the warps before each warp (exclusive prefix).
  int warp_ties[kWarps];
  double warp_mass[kWarps];
  int top_count;
  int top_id[kSampleMaxTopLogprobs];
  float top_x[kSampleMaxTopLogprobs];
  int token;
};

// The warp-range layout of the passes that rank ties or scan in id order: warp w owns the ids
// [begin, end), a multiple of 32 long, and walks them in tiles of 32 (lane l reads base + l), so
// loads stay coalesced and a ballot ranks a tile's elements in id order.
template <int BLOCK>
struct WarpRange {
  int begin;
  int end;
  __device__ explicit WarpRange(int vocab) {
    constexpr int kWarps = BLOCK / 32;
    const int per = ((vocab + kWarps - 1) / kWarps + 31) & ~31;
    begin = min(vocab, static_cast<int>(threadIdx.x / 32) * per);
    end = min(vocab, begin + per);
  }
};

// Sums N values over the block; every thread gets the sums. Fixed order, so deterministic.
template <int BLOCK, typename T, int N>
__device__ __forceinline__ void BlockSum(T (&v)[N], T* scratch) {
  constexpr int kWarps = BLOCK / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[n] += __shfl_xor_sync(0xffffffffu, v[n], o);
  }
  if (lane == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) scratch[warp * N + n] = v[n];
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; ++n) {
    T s = 0;
    for (int w = 0; w < kWarps; ++w) s += scratch[w * N + n];
    v[n] = s;
  }
  __syncthreads();  // scratch is reused by the next reduction
}

template <int BLOCK>
__device__ RowStats ComputeRowStats(const float* row, int vocab, Shared<BLOCK>& sh) {
  constexpr int kWarps = BLOCK / 32;
  RowStats s;
  for (int i = threadIdx.x; i < vocab; i += BLOCK) s.Add(Sanitized(row[i]), i);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    RowStats t;
    t.max = __shfl_xor_sync(0xffffffffu, s.max, o);
    t.argmax = __shfl_xor_sync(0xffffffffu, s.argmax, o);
    t.min = __shfl_xor_sync(0xffffffffu, s.min, o);
    t.n_cand = __shfl_xor_sync(0xffffffffu, s.n_cand, o);
    t.n_inf = __shfl_xor_sync(0xffffffffu, s.n_inf, o);
    s.Merge(t);
  }
  if (threadIdx.x % 32 == 0) sh.stats[threadIdx.x / 32] = s;
  __syncthreads();
  RowStats r = sh.stats[0];
  for (int w = 1; w < kWarps; ++w) r.Merge(sh.stats[w]);
  __syncthreads();
  return r;
}

// The largest key t in [lo, hi] with #{i : key_i >= t} >= k; the caller guarantees
// #{key >= lo} >= k. t is then the key of the k-th largest value.
template <int BLOCK>
__device__ uint32_t SearchCount(const float* row, int vocab, int k, uint32_t lo, uint32_t hi,
                                Shared<BLOCK>& sh) {
  while (lo < hi) {
    const uint64_t span = hi - lo;
    uint32_t piv[kPivots];  // ceil(span * (j + 1) / (kPivots + 1)) above lo: in (lo, hi]
    int cnt[kPivots];
#pragma unroll
    for (int j = 0; j < kPivots; ++j) {
      piv[j] = lo + static_cast<uint32_t>((span * (j + 1) + kPivots) / (kPivots + 1));
      cnt[j] = 0;
    }
    for (int i = threadIdx.x; i < vocab; i += BLOCK) {
      const uint32_t key = OrderKey(Sanitized(row[i]));
#pragma unroll
      for (int j = 0; j < kPivots; ++j) cnt[j] += key >= piv[j] ? 1 : 0;
    }
    BlockSum<BLOCK, int, kPivots>(cnt, sh.ired);
    uint32_t new_lo = lo, new_hi = hi;
#pragma unroll
    for (int j = 0; j < kPivots; ++j) {
      if (cnt[j] >= k) {
        new_lo = piv[j];
      } else {
        new_hi = piv[j] - 1;
        break;
      }
    }
    lo = new_lo;
    hi = new_hi;
  }
  return lo;
}

// The smallest key t in [lo, hi] with mass(key > t) < limit; the caller guarantees it holds at
// hi and fails at lo - 1. Only keys > lo count, so lo > kKeyNegInf keeps non-candidates out.
template <int BLOCK>
__device__ uint32_t SearchMass(const float* row, int vocab, const Weight& weight, double limit,
                               uint32_t lo, uint32_t hi, Shared<BLOCK>& sh) {
  while (lo < hi) {
    const uint64_t span = hi - lo;
    uint32_t piv[kPivots];  // lo + floor(span * j / kPivots): in [lo, hi)
    double mass[kPivots];
#pragma unroll
    for (int j = 0; j < kPivots; ++j) {
      piv[j] = lo + static_cast<uint32_t>(span * j / kPivots);
      mass[j] = 0.0;
    }
    for (int i = threadIdx.x; i < vocab; i += BLOCK) {
      const float z = Sanitized(row[i]);
      const uint32_t key = OrderKey(z);
      if (key <= piv[0]) continue;
      const double w = weight(z);
#pragma unroll
      for (int j = 0; j < kPivots; ++j) mass[j] += key > piv[j] ? w : 0.0;
    }
    BlockSum<BLOCK, double, kPivots>(mass, sh.red);
    uint32_t new_lo = lo, new_hi = hi;
#pragma unroll
    for (int j = 0; j < kPivots; ++j) {
      if (mass[j] < limit) {
        new_hi = piv[j];
        break;
      }
      new_lo = piv[j] + 1;
    }
    lo = new_lo;
    hi = new_hi;
  }
  return lo;
}

// Elements above threshold t (count, and mass when MASS) and the per-warp tie prefix of key == t
// into sh.warp_ties, for Kept() to rank the ties in id order.
template <int BLOCK, bool MASS>
__device__ Threshold CountAt(const float* row, int vocab, uint32_t t, const Weight& weight,
                             Shared<BLOCK>& sh) {
  constexpr int kWarps = BLOCK / 32;
  const WarpRange<BLOCK> range(vocab);
  const int lane = threadIdx.x % 32;
  int cnt[1] = {0};
  int ties = 0;
  double mass[1] = {0.0};
  for (int base = range.begin; base < range.end; base += 32) {
    const int i = base + lane;
    if (i >= range.end) continue;
    const float z = Sanitized(row[i]);
    const uint32_t key = OrderKey(z);
    if (key > t) {
      ++cnt[0];
      if constexpr (MASS) mass[0] += weight(z);
    } else if (key == t) {
      ++ties;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ties += __shfl_xor_sync(0xffffffffu, ties, o);
  if (lane == 0) sh.warp_ties[threadIdx.x / 32] = ties;
  BlockSum<BLOCK, int, 1>(cnt, sh.ired);  // its barriers publish warp_ties
  if (threadIdx.x == 0) {
    int before = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int n = sh.warp_ties[w];
      sh.warp_ties[w] = before;
      before += n;
    }
  }
  if constexpr (MASS) BlockSum<BLOCK, double, 1>(mass, sh.red);
  __syncthreads();
  return Threshold{cnt[0], mass[0]};
}

// Whether the element of this lane is kept by "key > t, or key == t with tie rank < m" (ranks in
// id order). Called by the whole warp for each tile in order; `ties` counts the ties the warp has
// passed (start: sh.warp_ties[warp]). `in` is false for lanes past the end or excluded elements.
__device__ __forceinline__ bool Kept(bool in, uint32_t key, uint32_t t, int m, int& ties) {
  const bool eq = in && key == t;
  const unsigned mask = __ballot_sync(0xffffffffu, eq);
  const int rank = ties + __popc(mask & ((1u << (threadIdx.x % 32)) - 1u));
  ties += __popc(mask);
  return in && (key > t || (eq && rank < m));
}

// Step 2's top entries: the k most likely raw tokens, most likely first, lower id on ties.
template <int BLOCK>
__device__ void TopLogprobs(const float* x, int vocab, int k, const LogSoftmax& lsm,
                            SampleTopDev* out, Shared<BLOCK>& sh) {
  k = min(k, vocab);
  const uint32_t t = SearchCount<BLOCK>(x, vocab, k, kKeyNegInf, OrderKey(lsm.max), sh);
  const Threshold th = CountAt<BLOCK, false>(x, vocab, t, Weight{0.0f, 1.0f}, sh);
  if (threadIdx.x == 0) sh.top_count = 0;
  __syncthreads();
  const WarpRange<BLOCK> range(vocab);
  int ties = sh.warp_ties[threadIdx.x / 32];
  for (int base = range.begin; base < range.end; base += 32) {
    const int i = base + threadIdx.x % 32;
    const bool in = i < range.end;
    const float v = in ? Sanitized(x[i]) : -INFINITY;
    if (Kept(in, OrderKey(v), t, k - th.n_gt, ties)) {
      const int slot = atomicAdd(&sh.top_count, 1);
      sh.top_id[slot] = i;
      sh.top_x[slot] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // At most 20 entries: an insertion sort by (value desc, id asc).
    for (int a = 1; a < k; ++a) {
      const int id = sh.top_id[a];
      const float v = sh.top_x[a];
      int b = a;
      for (; b > 0 && (sh.top_x[b - 1] < v || (sh.top_x[b - 1] == v && sh.top_id[b - 1] > id));
           --b) {
        sh.top_id[b] = sh.top_id[b - 1];
        sh.top_x[b] = sh.top_x[b - 1];
      }
      sh.top_id[b] = id;
      sh.top_x[b] = v;
    }
    for (int a = 0; a < k; ++a) out[a] = SampleTopDev{sh.top_id[a], lsm.LogProb(sh.top_x[a])};
  }
  __syncthreads();
}

// Step 7 over the kept set: candidates with (key > t, or key == t with tie rank < m) and
// w >= min_p. Pass 1 sums w per warp range; the one warp whose range holds u * W rescans it with
// warp prefix sums. A rounding disagreement between the two passes falls back to the warp's last
// token of positive weight (the CPU's fallback is its last kept token).
template <int BLOCK>
__device__ int InverseCdf(const float* z, int vocab, const Weight& weight, uint32_t t, int m,
                          float min_p, float u, int fallback, Shared<BLOCK>& sh) {
  constexpr int kWarps = BLOCK / 32;
  const WarpRange<BLOCK> range(vocab);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const auto kept_weight = [&](int i, int& ties) {
    const bool in_range = i < range.end;
    const float v = in_range ? Sanitized(z[i]) : -INFINITY;
    const uint32_t key = OrderKey(v);
    if (!Kept(in_range && key > kKeyNegInf, key, t, m, ties)) return 0.0f;
    const float w = weight(v);
    return w >= min_p ? w : 0.0f;
  };

  double acc = 0.0;
  int ties = sh.warp_ties[warp];
  for (int base = range.begin; base < range.end; base += 32) acc += kept_weight(base + lane, ties);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) sh.warp_mass[warp] = acc;
  if (threadIdx.x == 0) sh.token = fallback;
  __syncthreads();

  double total = 0.0;
  for (int w = 0; w < kWarps; ++w) total += sh.warp_mass[w];
  const double target = static_cast<double>(u) * total;
  int chosen = -1;
  double chosen_prefix = 0.0, prefix = 0.0;
  for (int w = 0; w < kWarps; ++w) {
    if (sh.warp_mass[w] > 0.0 && prefix <= target) {
      chosen = w;
      chosen_prefix = prefix;
    }
    prefix += sh.warp_mass[w];
  }

  if (warp == chosen) {
    double running = chosen_prefix;
    int token = -1, last = -1;
    ties = sh.warp_ties[warp];
    for (int base = range.begin; base < range.end; base += 32) {
      const float w = kept_weight(base + lane, ties);
      double c = w;  // inclusive prefix over the tile
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const double n = __shfl_up_sync(0xffffffffu, c, o);
        if (lane >= o) c += n;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, w > 0.0f && running + c > target);
      if (hit != 0) {
        token = base + __ffs(hit) - 1;
        break;
      }
      const unsigned positive = __ballot_sync(0xffffffffu, w > 0.0f);
      if (positive != 0) last = base + 31 - __clz(positive);
      running += __shfl_sync(0xffffffffu, c, 31);
    }
    if (lane == 0) sh.token = token >= 0 ? token : last;
  }
  __syncthreads();
  return sh.token;
}

// Steps 5-7: the filters as thresholds, then the inverse CDF. zs: the stats of the penalised row.
template <int BLOCK>
__device__ int SampleFiltered(const float* z, int vocab, const SampleSpecDev& s,
                              const RowStats& zs, Shared<BLOCK>& sh) {
  const Weight weight{zs.max, s.temperature};
  const uint32_t lo = OrderKey(zs.min), hi = OrderKey(zs.max);
  uint32_t t = kKeyNegInf;  // kept: key > t, or key == t with tie rank < m
  int m = INT_MAX;
  double mass = 0.0;  // of the top-k survivors (only needed for top-p)
  const bool top_k = s.top_k > 0 && s.top_k < zs.n_cand;
  const bool top_p = s.top_p < 1.0f;
  Threshold th;
  if (top_k) {
    t = SearchCount<BLOCK>(z, vocab, s.top_k, lo, hi, sh);
    th = CountAt<BLOCK, true>(z, vocab, t, weight, sh);
    m = s.top_k - th.n_gt;  // >= 1: the ties at t kept, lowest ids first
    mass = th.mass_gt + m * static_cast<double>(weight(FromKey(t)));
  } else if (top_p) {
    mass = CountAt<BLOCK, true>(z, vocab, kKeyNegInf, weight, sh).mass_gt;
  }
  if (top_p) {
    // Rank r is kept iff the mass before it < limit. The smallest t_p with mass(key > t_p) <
    // limit is the value of the last kept rank: everything above it is kept, nothing below, and
    // of its ties those whose mass before stays under the limit.
    const double limit = static_cast<double>(s.top_p) * mass;
    const uint32_t tp = SearchMass<BLOCK>(z, vocab, weight, limit, top_k ? t : lo, hi, sh);
    const Threshold thp = top_k && tp == t ? th : CountAt<BLOCK, true>(z, vocab, tp, weight, sh);
    const float wt = weight(FromKey(tp));
    int mp = INT_MAX;
    if (wt > 0.0f) {
      const double q = ceil((limit - thp.mass_gt) / wt);
      mp = q < static_cast<double>(INT_MAX) ? max(1, static_cast<int>(q)) : INT_MAX;
    }
    if (top_k && tp == t) {
      m = min(m, mp);
    } else {
      t = tp;
      m = mp;
    }
  }
  const float u = SampleUniform(s.seed, s.stream, s.step);
  return InverseCdf<BLOCK>(z, vocab, weight, t, m, s.min_p > 0.0f ? s.min_p : 0.0f, u,
                           zs.argmax, sh);
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) SampleKernel(const __grid_constant__ SampleParams p) {
  __shared__ Shared<BLOCK> sh;
  const SampleSpecDev s = p.specs[blockIdx.x];
  const int vocab = p.vocab;
  const float* x = p.logits + static_cast<int64_t>(s.row) * vocab;
  SampleTokenDev* out = p.out + blockIdx.x;

  // Steps 1-2: the raw distribution.
  const RowStats xs = ComputeRowStats<BLOCK>(x, vocab, sh);
  if (xs.max == -INFINITY) {
    if (threadIdx.x == 0) *out = SampleTokenDev{-1, 0.0f};
    return;
  }
  LogSoftmax lsm{xs.max, 0.0};
  if (xs.max == INFINITY) {
    lsm.log_mass = log(static_cast<double>(xs.n_inf));
  } else {
    double mass[1] = {0.0};
    for (int i = threadIdx.x; i < vocab; i += BLOCK) {
      mass[0] += expf(__fsub_rn(Sanitized(x[i]), xs.max));
    }
    BlockSum<BLOCK, double, 1>(mass, sh.red);
    lsm.log_mass = log(mass[0]);
  }
  if (s.num_top_logprobs > 0) {
    TopLogprobs<BLOCK>(x, vocab, s.num_top_logprobs, lsm, p.top + s.top_offset, sh);
  }

  // Step 3: the masked, biased and penalised row, materialised only for samples with a mask, a
  // bias or penalties to apply. The mask first (-inf stays -inf through every penalty below);
  // then the CPU's float operations, rounded the same way (no fused multiply-add). A pending
  // token (a fed row's previous token) adds one to its entry's count, or is a generated token
  // of its own.
  const float* z = x;
  RowStats zs = xs;
  if (s.penalized_row >= 0) {
    __shared__ int pending_listed;
    const int pending = s.pending_index >= 0 ? max(p.pending_tokens[s.pending_index], 0) : -1;
    float* zp = p.penalized + static_cast<int64_t>(s.penalized_row) * vocab;
    if (s.mask_index >= 0) {
      const uint64_t* mask = p.masks + s.mask_index * SampleMaskWords(vocab);
      for (int i = threadIdx.x; i < vocab; i += BLOCK) {
        zp[i] = (mask[i >> 6] >> (i & 63)) & 1u ? Sanitized(x[i]) : -INFINITY;
      }
    } else {
      for (int i = threadIdx.x; i < vocab; i += BLOCK) zp[i] = Sanitized(x[i]);
    }
    if (threadIdx.x == 0) pending_listed = 0;
    __syncthreads();
    const auto penalise = [&](int token, int generated_count, bool in_prompt, float bias) {
      // A -inf bias is min_tokens' ban: -inf also over a +inf logit (the CPU assigns it).
      float l = bias == -INFINITY ? -INFINITY : __fadd_rn(zp[token], bias);
      if (s.repetition_penalty != 1.0f && (in_prompt || generated_count > 0)) {
        l = l > 0.0f ? __fdiv_rn(l, s.repetition_penalty) : __fmul_rn(l, s.repetition_penalty);
      }
      if (generated_count > 0) {
        l = __fsub_rn(l, __fmul_rn(s.frequency_penalty, static_cast<float>(generated_count)));
        l = __fsub_rn(l, s.presence_penalty);
      }
      zp[token] = l;
    };
    for (int e = threadIdx.x; e < s.penalty_count; e += BLOCK) {
      const SamplePenaltyEntry pe = p.penalties[s.penalty_begin + e];
      const bool is_pending = pe.token == pending;
      if (is_pending) pending_listed = 1;  // entries are distinct: one writer at most
      penalise(pe.token, pe.generated_count + (is_pending ? 1 : 0), pe.in_prompt != 0, pe.bias);
    }
    __syncthreads();
    if (pending >= 0 && pending < vocab && pending_listed == 0 && threadIdx.x == 0) {
      penalise(pending, 1, false, 0.0f);
    }
    __syncthreads();
    z = zp;
    zs = ComputeRowStats<BLOCK>(z, vocab, sh);
  }

  int token = -1;
  if (zs.max > -INFINITY) {
    token = s.greedy ? zs.argmax : SampleFiltered<BLOCK>(z, vocab, s, zs, sh);  // step 4 or 5-7
  }
  if (threadIdx.x == 0) {
    *out = token < 0 ? SampleTokenDev{-1, 0.0f}
                     : SampleTokenDev{token, lsm.LogProb(Sanitized(x[token]))};
  }
}

}  // namespace banyan::kernels::cuda::sampling
