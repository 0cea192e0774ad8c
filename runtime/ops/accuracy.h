// accuracy.h - classification accuracy's numerator on the scores' device: the number of rows whose largest
// score is at their label (kernels/{cpu,cuda}/argmax_hits; ties to the first largest column, rows with a NaN
// never count). A float64 scalar that evaluation adds up on the device and reads once (no copy of the logits
// to the host per batch). Not differentiable.
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// scores (rows, classes) float32/float64, labels (rows) int64 on the same device -> float64 scalar (shape ()).
Tensor argmax_hits(const Tensor& scores, const Tensor& labels);

}  // namespace ddp::ops
