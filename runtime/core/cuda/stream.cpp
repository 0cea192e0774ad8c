// stream.cpp - per-thread current stream; the default compute stream of each device is created once.
#include "runtime/core/cuda/stream.h"

#include <mutex>
#include <vector>

#include "runtime/core/cuda_check.h"

namespace ddp::cuda {
namespace {
thread_local cudaStream_t t_override = nullptr;
thread_local bool t_has_override = false;

cudaStream_t compute_stream(int dev) {
  static std::mutex mu;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> g(mu);
  if (static_cast<int>(streams.size()) <= dev) streams.resize(dev + 1, nullptr);
  if (!streams[dev]) DDP_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[dev], cudaStreamNonBlocking));
  return streams[dev];
}
}  // namespace

int current_device() {
  int d = 0;
  DDP_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

cudaStream_t current_stream() {
  if (t_has_override) return t_override;
  return compute_stream(current_device());
}

cudaStream_t new_stream() {
  cudaStream_t s;
  DDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

StreamGuard::StreamGuard(cudaStream_t s) : prev_(t_has_override ? t_override : nullptr) {
  had_prev_ = t_has_override;
  t_override = s;
  t_has_override = true;
}
StreamGuard::~StreamGuard() {
  t_override = prev_;
  t_has_override = had_prev_;
}

int CudaDeviceApi::get() {
  int d = 0;
  DDP_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}
void CudaDeviceApi::set(int device) { DDP_CUDA_CHECK(cudaSetDevice(device)); }
void CudaDeviceApi::restore(int device) noexcept {
  // A destructor must not throw: a failure here is sticky only for a broken context, and the caller's next
  // checked call reports it with its own file:line.
  (void)cudaSetDevice(device);
}

}  // namespace ddp::cuda
