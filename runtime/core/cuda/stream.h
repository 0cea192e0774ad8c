// stream.h - the current CUDA stream of this thread (per device) and a guard that changes it.
// Ops launch on current_stream(); the NCCL group's comm stream waits on events recorded here.
#pragma once
#include <cuda_runtime.h>

#include "runtime/core/device_guard.h"

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

// The CUDA runtime's current device, as core/device_guard.h's device API.
struct CudaDeviceApi {
  static int get();             // cudaGetDevice, checked
  static void set(int device);  // cudaSetDevice, checked
  // cudaSetDevice from a destructor, unchecked: a failure shows at the caller's next checked call.
  static void restore(int device) noexcept;
};

// Makes `device` current for this thread until the guard is destroyed (then the previous one again); sets
// nothing when it is current already.
using DeviceGuard = BasicDeviceGuard<CudaDeviceApi>;

}  // namespace ddp::cuda
