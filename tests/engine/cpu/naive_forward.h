// An independent single-sequence forward pass in double precision (plain loops, no tree, no
// plan, no BLAS): the oracle of the CPU engine tests, covering the ModelConfig variants
// (q/k/v biases, per-head q/k norm, explicit head_dim, Llama 3 RoPE scaling, tied output).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "model/model.h"

namespace banyan::engine {

// Independent single-sequence LLaMA forward (llama2.c style, plain arrays, no tree, no plan).
// round_kv_row, when given, replaces each (token, kv head) row of K (after RoPE) and of V before
// it is kept (the FP8 KV cache's rounding, say).
inline std::vector<float> NaiveLogits(
    const model::ModelWeights& w, const std::vector<int32_t>& tokens,
    const std::function<void(double* row, int n)>& round_kv_row = nullptr) {
  const model::ModelConfig& c = w.config;
  const int dim = c.dim, d = c.head_dim(), hq = c.n_heads, hkv = c.n_kv_heads;
  const int T = static_cast<int>(tokens.size());
  auto matvec = [](const model::Tensor& m, const std::vector<double>& x) {
    const int64_t rows = m.shape[0], cols = m.shape[1];
    std::vector<double> y(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) y[r] += m.data[r * cols + k] * x[k];
    }
    return y;
  };
  auto rms = [&](const std::vector<double>& x, const model::Tensor& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    double inv = 1.0 / std::sqrt(ss / x.size() + c.norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g.data[i];
    return y;
  };
  // Frequencies: theta^(-2i/d); Llama 3's scaling keeps high frequencies (wavelength below
  // L / high_freq_factor, L the original context), divides low ones (wavelength above
  // L / low_freq_factor) by the factor, and interpolates in between by L / wavelength.
  std::vector<double> freq(d / 2);
  for (int i = 0; i < d / 2; ++i) {
    freq[i] = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / d);
    const model::RopeScaling& rs = c.rope_scaling;
    if (rs.type == model::RopeScalingType::kLlama3) {
      const double L = rs.original_max_pos, wavelength = 2 * M_PI / freq[i];
      const double ratio = L / wavelength;  // periods within the original context
      double keep;                          // 1: unscaled, 0: divided by the factor
      if (ratio > rs.high_freq_factor) {
        keep = 1;
      } else if (ratio < rs.low_freq_factor) {
        keep = 0;
      } else {
        keep = (ratio - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      }
      freq[i] = keep * freq[i] + (1 - keep) * freq[i] / rs.factor;
    }
    if (!rs.freq_divisors.empty()) freq[i] /= rs.freq_divisors[i];
  }
  auto rope = [&](std::vector<double>& v, int heads, int pos) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < d / 2; ++i) {
        double ang = pos * freq[i];
        int a = c.rope_style == model::RopeStyle::kInterleaved ? 2 * i : i;
        int b = c.rope_style == model::RopeStyle::kInterleaved ? 2 * i + 1 : i + d / 2;
        double x0 = v[h * d + a], x1 = v[h * d + b];
        v[h * d + a] = x0 * std::cos(ang) - x1 * std::sin(ang);
        v[h * d + b] = x0 * std::sin(ang) + x1 * std::cos(ang);
      }
    }
  };
  std::vector<std::vector<std::vector<double>>> K(c.n_layers), V(c.n_layers);
  std::vector<float> out;
  for (int t = 0; t < T; ++t) {
    std::vector<double> x(w.tok_embeddings.data.begin() + tokens[t] * dim,
                          w.tok_embeddings.data.begin() + (tokens[t] + 1) * dim);
    for (int l = 0; l < c.n_layers; ++l) {
      const model::LayerWeights& lw = w.layers[l];
      auto xb = rms(x, lw.attn_norm);
      auto q = matvec(lw.wq, xb), k = matvec(lw.wk, xb), v = matvec(lw.wv, xb);
      if (c.qkv_bias) {
        for (size_t i = 0; i < q.size(); ++i) q[i] += lw.bq.data[i];
        for (size_t i = 0; i < k.size(); ++i) k[i] += lw.bk.data[i];
        for (size_t i = 0; i < v.size(); ++i) v[i] += lw.bv.data[i];
      }
      if (c.qk_norm) {  // RMSNorm of every head on its own
        auto head_norm = [&](std::vector<double>& x, int heads, const model::Tensor& g) {
          for (int h = 0; h < heads; ++h) {
            std::vector<double> part(x.begin() + h * d, x.begin() + (h + 1) * d);
            part = rms(part, g);
            std::copy(part.begin(), part.end(), x.begin() + h * d);
          }
        };
        head_norm(q, hq, lw.q_norm);
        head_norm(k, hkv, lw.k_norm);
      }
      rope(q, hq, t);
      rope(k, hkv, t);
      if (round_kv_row) {
        for (int h = 0; h < hkv; ++h) {
          round_kv_row(k.data() + h * d, d);
          round_kv_row(v.data() + h * d, d);
        }
      }
      K[l].push_back(k);
      V[l].push_back(v);
      std::vector<double> att(hq * d, 0.0);
      for (int h = 0; h < hq; ++h) {
        int kh = h / (hq / hkv);
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int i = 0; i < d; ++i) dot += q[h * d + i] * K[l][j][kh * d + i];
          s[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int j = 0; j <= t; ++j) {
          for (int i = 0; i < d; ++i) att[h * d + i] += s[j] / sum * V[l][j][kh * d + i];
        }
      }
      auto o = matvec(lw.wo, att);
      for (int i = 0; i < dim; ++i) x[i] += o[i];
      auto xf = rms(x, lw.ffn_norm);
      auto g = matvec(lw.w_gate, xf), u = matvec(lw.w_up, xf);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      auto down = matvec(lw.w_down, g);
      for (int i = 0; i < dim; ++i) x[i] += down[i];
    }
    if (t == T - 1) {
      auto logits = matvec(w.output_matrix(), rms(x, w.final_norm));
      out.assign(logits.begin(), logits.end());
    }
  }
  return out;
}

}  // namespace banyan::engine
