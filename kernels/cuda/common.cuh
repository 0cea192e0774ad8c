// common.cuh - launch helpers shared by the CUDA kernels: grid sizing and the grid-stride loop.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace ddp::kernels::cuda {

constexpr int kBlock = 256;
inline int grid_for(int64_t n, int block = kBlock) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + block - 1) / block, 65535)));
}

}  // namespace ddp::kernels::cuda

// for (i over [0, n)) in a grid-stride loop
#define DDP_CUDA_KERNEL_LOOP(i, n)                                          \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)
