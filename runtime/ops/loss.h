// loss.h - differentiable losses that end a forward pass: fused cross-entropy and mean-squared error.
// Both return a scalar (shape ()) tensor of the input's dtype on the input's device.
#pragma once
#include <cstdint>
#include <optional>

#include "runtime/tensor/tensor.h"

namespace ddp::ops {

enum class LossReduction { Mean, Sum };

struct CrossEntropyOptions {
  // Rows whose target equals this value add nothing to the loss, the count or the gradient (e.g. padding).
  std::optional<int64_t> ignore_index;
  // Mean: divide by the number of non-ignored rows (NaN when every row is ignored, like PyTorch).
  // Sum: the plain sum over non-ignored rows.
  LossReduction reduction = LossReduction::Mean;
  // 0: every column of the logits is a class. Else only the first `classes` columns are (a vocabulary padded
  // to a multiple of 64 for the GEMMs, as llm.c pads GPT-2's 50257 to 50304): targets lie in [0, classes), the
  // softmax runs over those columns, and the padding columns get zero gradient. The CUDA kernels read the
  // padded rows in place; the CPU copies the classes' columns out first.
  int64_t classes = 0;
};

// logits: (..., C) float, targets: (...) int64 with values in [0, C) (or the ignore index) -> ().
// bfloat16 logits (the GPT's classifier under bf16 compute, runtime/ops/mixed_precision.h) give a float32
// loss: the arithmetic is float32 on their exact values, and their gradient is bfloat16, the float32
// gradient rounded once (on CUDA one kernel each way, 2 bytes per logit read and written; the CPU widens them
// and runs the float32 kernels).
// Fused log-softmax + negative log-likelihood; stable for any logit magnitude. The backward is
// (softmax - onehot) * dloss / count, recomputed from a saved per-row log-sum-exp (no (N, C) probabilities
// kept); it is written over the logits when nothing else holds them and the backward frees saved tensors
// (the usual `loss = cross_entropy(model(x), y); backward(loss)`), so a (B, T, vocab) classifier needs one
// such buffer, not two. A target outside [0, C) is a ddp::Error naming its value and position: at once on the
// CPU; on CUDA at the next ddp::check_device_errors() (runtime/tensor/device_checks.h), with no host wait
// here.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});
// How many cross_entropy backwards wrote the gradient over the logits in this process (tests, benchmarks).
int64_t cross_entropy_gradients_over_logits();

// pred, target: same shape and dtype -> (), mean((pred - target)^2). Both inputs are differentiable. Empty
// inputs give NaN (the mean of nothing, as PyTorch) and empty gradients.
Tensor mse_loss(const Tensor& pred, const Tensor& target);

}  // namespace ddp::ops
