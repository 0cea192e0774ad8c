// timing_event.cpp - timing events: create + record, elapsed time (after waiting for completion), destroy.
#include "runtime/core/cuda/timing_event.h"

#include <cuda_runtime.h>

#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::cuda {

void* record_timing_event(void* stream) {
  cudaEvent_t ev;
  DDP_CUDA_CHECK(cudaEventCreate(&ev));  // default flags: with timing
  DDP_CUDA_CHECK(cudaEventRecord(ev, stream ? static_cast<cudaStream_t>(stream) : current_stream()));
  return ev;
}

double elapsed_seconds(void* from, void* to) {
  auto a = static_cast<cudaEvent_t>(from), b = static_cast<cudaEvent_t>(to);
  DDP_CUDA_CHECK(cudaEventSynchronize(a));
  DDP_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  DDP_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return static_cast<double>(ms) * 1e-3;
}

void destroy_event(void* event) {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

}  // namespace ddp::cuda
