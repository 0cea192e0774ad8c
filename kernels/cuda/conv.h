// conv.h - 2-D convolution on the GPU through cuDNN (float32, float64), same names and geometry as
// kernels/cpu/conv.h. Algorithms come from cuDNN's heuristics (cudnnGet*Algorithm_v7), cached per geometry on
// each thread; cuDNN may use TF32 tensor cores for float32, like PyTorch's default.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cpu/conv.h"
#include "kernels/cuda/workspace.h"

namespace ddp::kernels::cuda {
using cpu::ConvGeometry;

// Runs on ddp::cuda::current_stream() (the cuDNN handle is bound to it). b may be null.
template <class T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const ConvGeometry& g,
                    const WorkspaceFn& workspace);
// Outputs may be null (not needed); the ones given are overwritten.
template <class T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const ConvGeometry& g,
                     const WorkspaceFn& workspace);

}  // namespace ddp::kernels::cuda
