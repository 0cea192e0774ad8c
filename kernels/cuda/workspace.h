// workspace.h - how a library-backed CUDA kernel (cuDNN convolution, cuDNN's fused attention) asks its caller for
// scratch device memory: a function returning at least `bytes` bytes, usable on the current stream until the
// call returns (the ops give a tensor from the stream-ordered caching allocator: runtime/ops/cuda_workspace.h).
#pragma once
#include <cstddef>
#include <functional>

namespace ddp::kernels::cuda {
using WorkspaceFn = std::function<void*(size_t bytes)>;
}  // namespace ddp::kernels::cuda
