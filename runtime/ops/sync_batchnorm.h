// sync_batchnorm.h - batch normalization whose statistics cover the whole distributed batch: every rank of a
// process group normalizes with the mean and variance of all ranks' samples together (SyncBatchNorm, like
// torch.nn.SyncBatchNorm), so N ranks with batch b compute what one process with batch N*b computes.
#pragma once
#include "runtime/distributed/process_group.h"
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// x: (n, C, H, W) on this rank (n may differ between ranks, and may be 0: such a rank contributes nothing but
// still joins both collectives); weight, bias: (C) or undefined; running_mean/var: (C) buffers or undefined.
// Forward: each rank all-gathers [local mean (C), local biased variance (C), local count] and merges them with
// the counts (Chan's parallel formula), normalizes, and moves the running stats toward the global mean and the
// variance unbiased over the global count. Backward: one all-reduce of [sum dy, sum dy*(x-mean)] (2C values);
// the weight/bias gradients stay local (DDP reduces them). Every rank of `pg` must call this in the same order
// (it is a collective); training mode only (evaluation is plain batch_norm2d with the running stats).
Tensor sync_batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, dist::ProcessGroup& pg, double momentum = 0.1,
                         double eps = 1e-5);

}  // namespace ddp::ops
