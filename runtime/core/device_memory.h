// device_memory.h - how much memory a GPU really held, for the benchmarks to print beside their memory
// account: the high-water marks of the device's default memory pool (every tensor comes from it:
// runtime/tensor/cuda/allocator.cpp) and what the whole device has in use now (all processes, CUDA contexts,
// NCCL's own buffers). Never changes the caller's current device.
#pragma once
#include <cstdint>

namespace ddp {

struct DeviceMemory {
  bool valid = false;              // false without CUDA or without a GPU
  int64_t pool_used = 0;           // bytes handed out by the pool now (cudaMemPoolAttrUsedMemCurrent)
  int64_t pool_used_peak = 0;      // bytes handed out by the pool at its peak (cudaMemPoolAttrUsedMemHigh)
  int64_t pool_reserved_peak = 0;  // bytes the pool held from the driver at its peak (ReservedMemHigh)
  int64_t device_used = 0;         // total - free now (cudaMemGetInfo)
  int64_t device_total = 0;
};

DeviceMemory device_memory(int device);
// Starts the pool's used peak (pool_used_peak) afresh from what is in use now; nothing without that GPU.
void reset_device_memory_peak(int device);

}  // namespace ddp
