// handles.cpp - the per-thread cuBLAS and cuDNN handles, pooled across threads (core/handle_pool.h) and
// destroyed at process teardown.
// Order at exit: a thread's thread_local ThreadHandles gives its handles back when it exits (the main
// thread's before any static is destroyed); then the Teardown statics below shut the pools down - cuDNN's
// first (cudnn_pool() makes cuBLAS's pool before its own), each handle destroyed with
// its device current. The pools are made after the first CUDA runtime call of the process (current_device()
// comes first), so their teardown runs before the runtime's own. If the runtime is unloading anyway
// (cudaErrorCudartUnloading), the handles are left to the process's end instead of calling into it.
#include "runtime/core/cuda/handles.h"

#include <memory>

#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/handle_pool.h"

namespace ddp::cuda {

namespace {

// True while the CUDA runtime still takes calls (false during its unloading at exit).
bool runtime_alive() {
  int d = 0;
  return cudaGetDevice(&d) != cudaErrorCudartUnloading;
}

// Destroys one handle with its device current; called by the pool (a destructor path: never throws).
template <class Handle, class DestroyFn>
void destroy_on_device(int device, Handle h, DestroyFn destroy) noexcept {
  if (!runtime_alive()) return;
  try {
    DeviceGuard dg(device);
    destroy(h);
  } catch (const std::exception&) {
    // The context is broken or going away: nothing left to release it into.
  }
}

// Shuts a pool down at static destruction, while threads may still hold it (their handles are destroyed
// when they give them back).
template <class Handle>
struct Teardown {
  std::shared_ptr<HandlePool<Handle>> pool;
  ~Teardown() { pool->shutdown(); }
};

std::shared_ptr<HandlePool<cublasHandle_t>> cublas_pool() {
  static Teardown<cublasHandle_t> t{std::make_shared<HandlePool<cublasHandle_t>>(
      [](int device) {
        DeviceGuard dg(device);
        cublasHandle_t h = nullptr;
        DDP_CUBLAS_CHECK(cublasCreate(&h));
        return h;
      },
      [](int device, cublasHandle_t h) {
        destroy_on_device(device, h, [](cublasHandle_t x) { DDP_CUBLAS_CHECK(cublasDestroy(x)); });
      })};
  return t.pool;
}

std::shared_ptr<HandlePool<cudnnHandle_t>> cudnn_pool() {
  cublas_pool();  // cuBLAS's pool exists first, so cuDNN's is torn down before it
  static Teardown<cudnnHandle_t> t{std::make_shared<HandlePool<cudnnHandle_t>>(
      [](int device) {
        DeviceGuard dg(device);
        cudnnHandle_t h = nullptr;
        DDP_CUDNN_CHECK(cudnnCreate(&h));
        return h;
      },
      [](int device, cudnnHandle_t h) {
        destroy_on_device(device, h, [](cudnnHandle_t x) { DDP_CUDNN_CHECK(cudnnDestroy(x)); });
      })};
  return t.pool;
}

}  // namespace

cublasHandle_t cublas_handle() {
  const int dev = current_device();  // the first CUDA call: the runtime is up before the pool exists
  thread_local ThreadHandles<cublasHandle_t> mine(cublas_pool());
  cublasHandle_t h = mine.get(dev);
  DDP_CUBLAS_CHECK(cublasSetStream(h, current_stream()));
  return h;
}

cudnnHandle_t cudnn_handle() {
  const int dev = current_device();
  thread_local ThreadHandles<cudnnHandle_t> mine(cudnn_pool());
  cudnnHandle_t h = mine.get(dev);
  DDP_CUDNN_CHECK(cudnnSetStream(h, current_stream()));
  return h;
}

LibraryHandleCounts library_handle_counts() {
  auto b = cublas_pool();
  auto d = cudnn_pool();
  return {b->created(), b->destroyed(), b->free_handles(), d->created(), d->destroyed(), d->free_handles()};
}

void destroy_free_library_handles() {
  cudnn_pool()->destroy_free();
  cublas_pool()->destroy_free();
}

}  // namespace ddp::cuda
