// handles.h - the cuBLAS and cuDNN handle of the calling thread for the current device, bound to the current
// stream on each call. Handles come from a process-wide pool (core/handle_pool.h): a thread gives its handles
// back when it exits and the next thread reuses them, so there are as many as threads that used a device at
// once. cuBLAS's workspace is the handle's default one (allocated by cublasCreate, freed by cublasDestroy;
// cublasSetStream on each call keeps it), so it follows its handle. At process teardown every pooled handle
// is destroyed with its device current, cuDNN's before cuBLAS's, before the CUDA runtime unloads.
#pragma once
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>

namespace ddp::cuda {
// The calling thread's cuBLAS handle for the current device, with its stream set to current_stream().
cublasHandle_t cublas_handle();
// The calling thread's cuDNN handle for the current device, with its stream set to current_stream().
cudnnHandle_t cudnn_handle();

// Handles made, destroyed and waiting in the pools so far (tests/gpu/test_gpu_handles.cpp).
struct LibraryHandleCounts {
  size_t cublas_created = 0, cublas_destroyed = 0, cublas_free = 0;
  size_t cudnn_created = 0, cudnn_destroyed = 0, cudnn_free = 0;
};
LibraryHandleCounts library_handle_counts();
// Destroys the handles no thread holds now (the pools stay open: a later call makes new ones).
void destroy_free_library_handles();
}  // namespace ddp::cuda
