// The property every model-loader harness checks on weights that loaded: the config is usable
// and every tensor the engine will index has the shape the config implies, with that many
// floats behind it (or, for a projection held in FP8, that many bytes).
#pragma once

#include <cstddef>

#include "model/model.h"
#include "model/weights_layout.h"
#include "tests/fuzz/fuzz_util.h"

namespace banyan::fuzz {

inline void CheckLoadedWeights(const model::ModelWeights& w) {
  FUZZ_CHECK(model::ValidateWeights(w).ok());
  FUZZ_CHECK(static_cast<int>(w.layers.size()) == w.config.n_layers);
  for (const model::TensorSlot& slot : model::ListTensorSlots(w.config)) {
    const model::Tensor& t = model::SlotTensor(w, slot);
    if (const model::QuantizedTensor* q = model::SlotQuantized(w, slot); q != nullptr && !q->empty()) {
      FUZZ_CHECK(t.data.empty() && q->shape == slot.shape);  // an FP8 projection
      FUZZ_CHECK(q->codes.size() == static_cast<size_t>(slot.shape[0] * slot.shape[1]));
      continue;
    }
    FUZZ_CHECK(t.shape == slot.shape);
    FUZZ_CHECK(t.data.size() == static_cast<size_t>(t.numel()));
  }
}

}  // namespace banyan::fuzz
