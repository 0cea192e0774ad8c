// allocator.cpp - CUDA memory for tensors: stream-ordered allocation from the device's default memory pool
// (cudaMallocAsync on the current stream; the pool keeps freed blocks, so no cudaMalloc per op), and frees
// that wait for every stream recorded as a user of the block. Pinned host memory for staging copies.
// Allocation and free run with the block's device current and give the caller its own current device back
// (a DeviceGuard): an allocation on cuda:1 must not move a thread working on cuda:0.
#include <atomic>
#include <cstring>
#include <mutex>

#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"
#include "runtime/tensor/storage.h"

namespace ddp::detail {
namespace {
// Keep freed memory in the pool instead of returning it to the driver at each synchronisation.
void configure_pool_once(int device) {
  static std::once_flag flags[64];
  std::call_once(flags[device & 63], [device] {
    cudaMemPool_t pool;
    DDP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    DDP_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  });
}
}  // namespace

void* cuda_allocate(size_t nbytes, int device, void** stream_out) {
  return on_device<ddp::cuda::CudaDeviceApi>(device, [&] {
    configure_pool_once(device);
    cudaStream_t s = ddp::cuda::current_stream();  // of `device`: the guard made it current
    void* p = nullptr;
    DDP_CUDA_CHECK(cudaMallocAsync(&p, nbytes, s));
    *stream_out = s;
    return p;
  });
}

void cuda_free(void* p, int device, void* alloc_stream, const std::vector<void*>& used_on) {
  on_device<ddp::cuda::CudaDeviceApi>(device, [&] {
    cudaStream_t s = static_cast<cudaStream_t>(alloc_stream);
    for (void* other : used_on) {  // the free must not overtake work still queued on other streams
      cudaEvent_t ev;
      DDP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      DDP_CUDA_CHECK(cudaEventRecord(ev, static_cast<cudaStream_t>(other)));
      DDP_CUDA_CHECK(cudaStreamWaitEvent(s, ev, 0));
      DDP_CUDA_CHECK(cudaEventDestroy(ev));
    }
    DDP_CUDA_CHECK(cudaFreeAsync(p, s));
  });
}

void* pinned_allocate(size_t nbytes) {
  if (ddp::cuda_device_count() == 0) return std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
  void* p = nullptr;
  DDP_CUDA_CHECK(cudaMallocHost(&p, nbytes));
  return p;
}
void pinned_free(void* p) {
  if (ddp::cuda_device_count() == 0) {
    std::free(p);
    return;
  }
  DDP_CUDA_CHECK(cudaFreeHost(p));
}

namespace {
std::atomic<int64_t> g_device_to_host_copies{0};
}  // namespace
int64_t device_to_host_copies() { return g_device_to_host_copies.load(); }

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes, bool synchronous) {
  if (nbytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  if (dst_dev.is_cpu()) g_device_to_host_copies.fetch_add(1);
  cudaStream_t s = ddp::cuda::current_stream();
  DDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s));
  if (synchronous || dst_dev.is_cpu()) DDP_CUDA_CHECK(cudaStreamSynchronize(s));
}

void fill_bytes_zero(void* dst, Device dev, size_t nbytes) {
  if (nbytes == 0) return;
  if (dev.is_cpu()) {
    std::memset(dst, 0, nbytes);
    return;
  }
  DDP_CUDA_CHECK(cudaMemsetAsync(dst, 0, nbytes, ddp::cuda::current_stream()));
}

}  // namespace ddp::detail
