// Draft heads for speculative decoding (Hydra's sequentially dependent heads, or Medusa-style
// independent ones): loading a head set (docs/hydra.md, "File format") and drafting on the CPU.
//
// Head i drafts x[t+2+i] from h, the base model's final-norm hidden state at the last verified
// token x[t], and (Hydra) the embeddings of x[t+1] .. x[t+1+i]:
//   u = concat(h, E[x[t+1]], ..., E[x[t+1+i]])   (Medusa: u = h)
//   z = h + W2 silu(W1 u + b1) + b2,   logits = base LM head . z
// x[t+1], the root, is the base model's own next token. The heads reuse the base model's
// embedding table and LM head; they hold only their MLPs.
//
// Load checks the config's format and version, the head kind, the dtype, that the base model's
// shape fields equal the loaded model's, and every tensor's presence and shape; each refusal
// names the field or tensor. Verification of the drafts through the prefix tree is separate
// work (issue 12).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace banyan::engine {

enum class DraftHeadKind { kHydra, kMedusa };

class DraftHeads {
 public:
  // `config_path`: the head set's JSON config (its tensors file is read from beside it).
  // `base`: the weights the heads will run on top of (kept by reference: must outlive this).
  static absl::StatusOr<DraftHeads> Load(const std::string& config_path, const model::ModelWeights& base);

  DraftHeadKind kind() const { return kind_; }
  int num_heads() const { return static_cast<int>(heads_.size()); }
  int mlp_hidden() const { return mlp_hidden_; }

  // Logits [vocab] of head `i` given h [dim] and the path x[t+1] .. x[t+1+i] (`path`, i + 1
  // tokens; Medusa heads ignore all but its length).
  absl::Status HeadLogits(int i, std::span<const float> h, std::span<const int32_t> path,
                          std::vector<float>* logits) const;

  // The greedy chain: x[t+2] .. x[t+1+num_heads], each the argmax of its head given the chain so
  // far (lowest id on ties).
  absl::StatusOr<std::vector<int32_t>> Chain(std::span<const float> h, int32_t root) const;

  // The same chain for S samples at once, `length` <= num_heads tokens each, with float BLAS
  // (Chain accumulates in double, as the reference does): h is [S x dim], roots [S]; out
  // receives [S x length]. TreeBatch with one child per node.
  absl::Status ChainBatch(std::span<const float> h, std::span<const int32_t> roots, int length,
                          std::vector<int32_t>* out) const;

  // A candidate tree: branching[d] children per node at depth d (top-b of head d), at most
  // num_heads levels. Nodes in breadth-first order; node 0 is the root (x[t+1], parent -1).
  struct Tree {
    std::vector<int32_t> token;
    std::vector<int32_t> parent;
    std::vector<int32_t> depth;  // 0 for the root
  };
  absl::StatusOr<Tree> BuildTree(std::span<const float> h, int32_t root,
                                 std::span<const int32_t> branching) const;
  // The same trees for S samples at once with float BLAS: one GEMM per head layer over every
  // node of a level of every sample (what the engine loop drafts with). h is [S x dim].
  absl::Status TreeBatch(std::span<const float> h, std::span<const int32_t> roots,
                         std::span<const int32_t> branching, std::vector<Tree>* out) const;

  // A tree's branching factors from text, "4,2,2": each in [1, 16], at most 8 levels and 256
  // candidates (banyand's --draft-tree, banyan generate's).
  static absl::StatusOr<std::vector<int32_t>> ParseBranching(const std::string& text);

  // One head's MLP (fp32, row-major): fc1_w [mlp_hidden x input_size], fc2_w [dim x mlp_hidden];
  // input_size is dim * (i + 2) for Hydra head i, dim for Medusa heads. For backends that run the
  // heads themselves (Backend::DraftTrees).
  struct Head {
    model::Tensor fc1_w, fc1_b, fc2_w, fc2_b;
    int input_size = 0;
  };
  const Head& head(int i) const { return heads_[static_cast<size_t>(i)]; }
  int dim() const { return dim_; }
  // Unique in the process for every loaded head set (copies keep it): what a backend that
  // uploaded a head set compares, since a new set may be loaded at a freed one's address.
  uint64_t id() const { return id_; }

 private:
  DraftHeads(const model::ModelWeights& base) : base_(&base) {}

  const model::ModelWeights* base_;
  DraftHeadKind kind_ = DraftHeadKind::kHydra;
  int dim_ = 0;
  int mlp_hidden_ = 0;
  uint64_t id_ = 0;
  std::vector<Head> heads_;
};

}  // namespace banyan::engine
