// accuracy.cpp - ops::argmax_hits: checks, then the CPU loop or the CUDA warp-per-row kernel (accuracy.h).
#include "runtime/ops/accuracy.h"

#include "kernels/cpu/argmax_hits.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/argmax_hits.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::ops {

Tensor argmax_hits(const Tensor& scores, const Tensor& labels) {
  DDP_CHECK(scores.defined() && labels.defined(), "argmax_hits: scores or labels is undefined");
  DDP_CHECK(scores.dim() == 2, "argmax_hits: scores must be (rows, classes); got shape ", shape_str(scores.shape()));
  DDP_CHECK(labels.dim() == 1 && labels.size(0) == scores.size(0), "argmax_hits: labels must be (rows) = (",
            scores.size(0), "); got shape ", shape_str(labels.shape()));
  DDP_CHECK(labels.dtype() == DType::I64, "argmax_hits: labels must be int64, got ", dtype_name(labels.dtype()));
  DDP_CHECK(labels.device() == scores.device(), "argmax_hits: labels on ", labels.device().str(), ", scores on ",
            scores.device().str(), " (move them to one device)");
  const Tensor& s = scores, &l = labels;  // tensors are contiguous
  const int64_t rows = s.size(0), cols = s.size(1);
  Tensor hits = Tensor::zeros({}, DType::F64, s.device());
  DDP_DISPATCH_FLOATING(s.dtype(), "argmax_hits", [&] {
#ifdef DDP_WITH_CUDA
    if (s.device().is_cuda()) {
      kernels::cuda::count_argmax_hits(s.data<scalar_t>(), l.data<int64_t>(), rows, cols, hits.data<double>(),
                                       cuda::current_stream());
      return;
    }
#endif
    *hits.data<double>() =
        static_cast<double>(kernels::cpu::count_argmax_hits(s.data<scalar_t>(), l.data<int64_t>(), rows, cols));
  });
  return hits;
}

}  // namespace ddp::ops
