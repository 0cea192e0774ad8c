// stream.cpp - per-thread current stream; the default compute stream of each device is created once and then
// read without a lock.
#include "runtime/core/cuda/stream.h"

#include <atomic>
#include <mutex>

#include "runtime/core/cuda_check.h"

namespace ddp::cuda {
namespace {
thread_local cudaStream_t t_override = nullptr;
thread_local bool t_has_override = false;

// Read on every op launch: a lock-free load once the device's stream exists (the mutex only guards creation).
constexpr int kMaxDevices = 256;
std::atomic<cudaStream_t> g_compute_streams[kMaxDevices];

cudaStream_t compute_stream(int dev) {
  DDP_CHECK(dev >= 0 && dev < kMaxDevices, "cuda: device ", dev, " is beyond the ", kMaxDevices,
            " devices this build supports");
  if (cudaStream_t s = g_compute_streams[dev].load(std::memory_order_acquire)) return s;
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  cudaStream_t s = g_compute_streams[dev].load(std::memory_order_relaxed);
  if (!s) {
    DDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    g_compute_streams[dev].store(s, std::memory_order_release);
  }
  return s;
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
