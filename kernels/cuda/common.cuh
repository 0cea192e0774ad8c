// common.cuh - launch helpers shared by the CUDA kernels: grid sizing, the device's multiprocessor count and
// the grid-stride loop.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {

constexpr int kBlock = 256;
inline int grid_for(int64_t n, int block = kBlock) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + block - 1) / block, 65535)));
}

// Multiprocessors of the current device (132 on an H200), asked once per device and thread.
inline int multiprocessor_count() {
  thread_local int device = -1, count = 0;
  int d = 0;
  DDP_CUDA_CHECK(cudaGetDevice(&d));
  if (d != device) {
    DDP_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, d));
    device = d;
  }
  return count;
}

// Stream-ordered scratch memory for intermediate sums on the current stream (cudaMallocAsync's pool).
struct StreamScratch {
  void* ptr = nullptr;
  explicit StreamScratch(size_t bytes) {
    DDP_CUDA_CHECK(cudaMallocAsync(&ptr, bytes > 0 ? bytes : 1, ddp::cuda::current_stream()));
  }
  ~StreamScratch() { cudaFreeAsync(ptr, ddp::cuda::current_stream()); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
};

}  // namespace ddp::kernels::cuda

// for (i over [0, n)) in a grid-stride loop
#define DDP_CUDA_KERNEL_LOOP(i, n)                                          \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)
