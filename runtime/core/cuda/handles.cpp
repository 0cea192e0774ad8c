// handles.cpp - lazily created per-thread, per-device library handles (never destroyed: they live as long
// as the thread's CUDA context).
#include "runtime/core/cuda/handles.h"

#include <unordered_map>

#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::cuda {

cublasHandle_t cublas_handle() {
  thread_local std::unordered_map<int, cublasHandle_t> handles;
  int dev = current_device();
  auto it = handles.find(dev);
  if (it == handles.end()) {
    cublasHandle_t h;
    DDP_CUBLAS_CHECK(cublasCreate(&h));
    it = handles.emplace(dev, h).first;
  }
  DDP_CUBLAS_CHECK(cublasSetStream(it->second, current_stream()));
  return it->second;
}

cudnnHandle_t cudnn_handle() {
  thread_local std::unordered_map<int, cudnnHandle_t> handles;
  int dev = current_device();
  auto it = handles.find(dev);
  if (it == handles.end()) {
    cudnnHandle_t h;
    DDP_CUDNN_CHECK(cudnnCreate(&h));
    it = handles.emplace(dev, h).first;
  }
  DDP_CUDNN_CHECK(cudnnSetStream(it->second, current_stream()));
  return it->second;
}

}  // namespace ddp::cuda
