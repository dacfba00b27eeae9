// The property every model-loader harness checks on weights that loaded: the config is usable
// and every tensor the engine will index has the shape the config implies, with that many
// floats behind it.
#pragma once

#include <cstddef>

#include "engine/model/model.h"
#include "engine/model/weights_layout.h"
#include "tests/fuzz/fuzz_util.h"

namespace banyan::fuzz {

inline void CheckLoadedWeights(const engine::ModelWeights& w) {
  FUZZ_CHECK(engine::ValidateWeights(w).ok());
  FUZZ_CHECK(static_cast<int>(w.layers.size()) == w.config.n_layers);
  for (const engine::TensorSlot& slot : engine::ListTensorSlots(w.config)) {
    const engine::Tensor& t = engine::SlotTensor(w, slot);
    FUZZ_CHECK(t.shape == slot.shape);
    FUZZ_CHECK(t.data.size() == static_cast<size_t>(t.numel()));
  }
}

}  // namespace banyan::fuzz
