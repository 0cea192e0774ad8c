// device_memory.cpp - see device_memory.h. Errors here give an invalid reading, never an exception: the
// figure is a report, not a control.
#include "runtime/core/device_memory.h"

#include "runtime/core/device.h"

#ifdef DDP_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/core/cuda_check.h"
#endif

namespace ddp {

DeviceMemory device_memory(int device) {
  DeviceMemory m;
#ifdef DDP_WITH_CUDA
  if (device < 0 || device >= cuda_device_count()) return m;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return m;
  cudaMemPool_t pool;
  uint64_t used = 0, reserved = 0, used_now = 0;
  size_t free_b = 0, total_b = 0;
  const bool ok = cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess &&
                  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used) == cudaSuccess &&
                  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used_now) == cudaSuccess &&
                  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved) == cudaSuccess &&
                  cudaSetDevice(device) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
  cudaSetDevice(previous);
  if (!ok) {
    cudaGetLastError();  // not sticky: leave no error for the next checked call
    return m;
  }
  m.valid = true;
  m.pool_used = static_cast<int64_t>(used_now);
  m.pool_used_peak = static_cast<int64_t>(used);
  m.pool_reserved_peak = static_cast<int64_t>(reserved);
  m.device_used = static_cast<int64_t>(total_b - free_b);
  m.device_total = static_cast<int64_t>(total_b);
#else
  (void)device;
#endif
  return m;
}

void reset_device_memory_peak(int device) {
#ifdef DDP_WITH_CUDA
  if (device < 0 || device >= cuda_device_count()) return;
  cudaMemPool_t pool;
  DDP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t zero = 0;  // the high-water mark restarts from the current use
  DDP_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
#else
  (void)device;
#endif
}

}  // namespace ddp
