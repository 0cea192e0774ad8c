// stream.h - the current CUDA stream of this thread (per device) and a guard that changes it.
// Ops launch on current_stream(); the NCCL group's comm stream waits on events recorded here.
#pragma once
#include <cuda_runtime.h>

namespace ddp::cuda {

// This thread's current stream on the current device: a per-device non-blocking "compute" stream created
// on first use, unless a StreamGuard set another one.
cudaStream_t current_stream();
int current_device();
// A new non-blocking stream on the current device, owned by the caller (cudaStreamDestroy it).
cudaStream_t new_stream();

// Sets the current stream for this thread until the guard is destroyed.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t prev_;
  bool had_prev_;
};

// Makes `device` current for this thread until the guard is destroyed (then restores the previous one).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

}  // namespace ddp::cuda
