// cuda_workspace.h - the workspace source the ops hand to library-backed CUDA kernels (kernels/cuda/workspace.h):
// tensors from the device's caching allocator, held as long as this object. The allocator's blocks are
// stream-ordered, so dropping them after the kernels are enqueued on the current stream is safe.
#pragma once
#ifdef DDP_WITH_CUDA
#include <vector>

#include "kernels/cuda/workspace.h"
#include "runtime/tensor/tensor.h"

namespace ddp::ops {
struct CudaWorkspace {
  Device device;
  std::vector<Tensor> held;
  kernels::cuda::WorkspaceFn fn() {
    return [this](size_t bytes) {
      held.push_back(Tensor::empty({static_cast<int64_t>(bytes)}, DType::U8, device));
      return held.back().raw_data();
    };
  }
};
}  // namespace ddp::ops
#endif
