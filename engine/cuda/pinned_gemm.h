// The deterministic mode's GEMMs on cuBLASLt: out[M, N] = a[M, K] . w[N, K]^T (+ beta * out),
// 16-bit operands, fp32 sums, row-major as cublas_gemm.h's RowMajorGemm, with each output row
// the same bit for bit whatever M is.
//
// Why not plain cuBLAS: its heuristic picks a kernel, tile and split of K by the whole shape, so
// a row's sums change with the number of rows in the step. Here the algorithm is chosen once per
// (N, K, output type) and kept for every M, with split-K ruled out (no reduction scheme, no
// workspace): the sums of an output element are then the same sequence of tensor-core steps over
// K whatever the grid. That is what cuBLASLt's kernels do, not what its documentation promises,
// so every shape is checked before it is trusted (SelfCheck): the rows of a product of many
// tokens against the same rows run alone and in blocks, at other offsets, bit for bit. Besides
// the algorithm for many rows, the heuristic's algorithm for each tier of fewer rows (kTiers) is
// kept when the check finds it bitwise equal to that one, and runs products of up to its tier's
// rows; a shape that fails the check runs on kernels/cuda/invariant_gemm.h (our own fixed-order
// kernel, slower), for every M, and the log says so.
//
// Not thread-safe: one per stream owner (the CUDA backend's engine thread).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/dtype.h"

namespace banyan::engine::cuda {

class PinnedGemm {
 public:
  // Tiers of fewer rows: products of at most max_rows run the heuristic's algorithm for
  // ref_rows where the check kept it (the smallest such tier that M fits).
  struct Tier {
    int64_t max_rows, ref_rows;
  };
  static constexpr Tier kTiers[] = {{32, 16}, {96, 64}, {192, 128}, {256, 256}};
  static constexpr int kNumTiers = static_cast<int>(std::size(kTiers));
  // The self-check's product: this many random activation rows (more than one tile of rows of
  // any cuBLASLt kernel, so rows land in different tiles and at different places in a tile; at
  // least the largest tier and some).
  static constexpr int64_t kCheckRows = 272;

  static absl::StatusOr<std::unique_ptr<PinnedGemm>> Create(kernels::cuda::DType dtype);
  ~PinnedGemm();
  PinnedGemm(const PinnedGemm&) = delete;
  PinnedGemm& operator=(const PinnedGemm&) = delete;

  // out_type: CUDA_R_32F or the operands' type. The first call for a (N, K, out_type) chooses
  // and checks its algorithms on `stream` (synchronously, with w itself and random
  // activations); later calls only launch.
  absl::Status Run(const void* w, const void* a, void* out, cudaDataType_t out_type, int64_t M,
                   int64_t N, int64_t K, float beta, cudaStream_t stream);

  // Chooses and checks the algorithms of (N, K, out_type) now, with the weights `w` (what the
  // first Run would do). Errors only where CUDA itself fails; a shape that fails its check is
  // not an error (it falls back, and Decision says why).
  absl::Status Prepare(const void* w, int64_t N, int64_t K, cudaDataType_t out_type,
                       cudaStream_t stream) {
    absl::StatusOr<Shape*> s = ShapeFor(w, N, K, out_type, stream);
    return s.ok() ? absl::OkStatus() : s.status();
  }

  // What the check decided for a shape: "tiers 32/96+many" (the tiers of those max_rows kept
  // beside the algorithm for many rows), "many" (one for all M), "fallback: <why>"
  // (InvariantGemm); empty before its first Run.
  std::string Decision(int64_t N, int64_t K, cudaDataType_t out_type) const;
  // Every shape so far, "N x K out: decision", joined by "; ".
  std::string Summary() const;

 private:
  struct Shape;
  struct Layouts;
  PinnedGemm() = default;
  absl::StatusOr<Shape*> ShapeFor(const void* w, int64_t N, int64_t K, cudaDataType_t out_type,
                                  cudaStream_t stream);
  absl::StatusOr<Layouts*> LayoutsFor(int64_t M, int64_t N, int64_t K, cudaDataType_t out_type);
  // tier: an index into kTiers whose algorithm runs, or -1 for the many-rows one.
  absl::Status Launch(const Shape& s, int tier, const void* w, const void* a, void* out, int64_t M,
                      float beta, cudaStream_t stream);
  absl::Status SelfCheck(Shape& s, const void* w, cudaStream_t stream);

  kernels::cuda::DType dtype_ = kernels::cuda::DType::kBf16;
  cublasLtHandle_t lt_ = nullptr;
  using Key = std::tuple<int64_t, int64_t, int>;  // N, K, out type
  absl::flat_hash_map<Key, std::unique_ptr<Shape>> shapes_;
  absl::flat_hash_map<std::tuple<int64_t, int64_t, int64_t, int>, std::unique_ptr<Layouts>>
      layouts_;  // M, N, K, out type
};

}  // namespace banyan::engine::cuda
