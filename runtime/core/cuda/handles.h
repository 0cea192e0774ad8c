// handles.h - one cuBLAS and one cuDNN handle per (thread, device), bound to the current stream on each call.
#pragma once
#include <cublas_v2.h>
#include <cudnn.h>

namespace ddp::cuda {
// The calling thread's cuBLAS handle for the current device, with its stream set to current_stream().
cublasHandle_t cublas_handle();
// The calling thread's cuDNN handle for the current device, with its stream set to current_stream().
cudnnHandle_t cudnn_handle();
}  // namespace ddp::cuda
