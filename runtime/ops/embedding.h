// embedding.h - differentiable embedding lookup (GPT-2's token and position tables).
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// weight: (V, C), indices: (...) int64 in [0, V) -> (..., C), out[i] = weight[indices[i]].
// Backward scatter-adds into a dense (V, C) gradient of weight (rows never looked up get 0).
// An index outside [0, V) is a ddp::Error naming its value, position and the table (weight.name()): at once
// on the CPU; on a GPU at the next host read (ddp::check_device_errors, runtime/tensor/device_checks.h), with
// a zero output row and no gradient for it meanwhile.
Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace ddp::ops
