// device_kernel.h - "call the kernel of this device" for the ops: the CPU and CUDA kernels of an op share
// their name (kernels/cpu/<op>.h, kernels/cuda/<op>.h), so an op names it once and the tensor's device picks
// it:
//
//   DDP_KERNEL(x.device(), relu_forward, px, py, n);            // kernels::{cpu,cuda}::relu_forward(...)
//   DDP_KERNEL_ON_STREAM(x.device(), max_pool2d_forward, px, py, g);  // the CUDA one also gets the stream
//
// DDP_KERNEL_ON_STREAM appends this thread's current CUDA stream (runtime/core/cuda/stream.h) to the CUDA
// call; DDP_KERNEL is for CUDA kernels that take none (they launch on the current stream themselves). Both
// are expressions of the kernels' (void) type, so `return DDP_KERNEL(...);` works in a void function. In a
// build without CUDA they call the CPU kernel, and a tensor on a GPU is an error naming the kernel. The op
// file still includes kernels/cuda/<op>.h under #ifdef DDP_WITH_CUDA, once.
#pragma once
#include "runtime/core/device.h"
#include "runtime/core/error.h"

namespace ddp::ops {
// An op's early check that this build can run it on `device`: a GPU tensor in a build without CUDA is an
// error naming the op ("relu on cuda:0 needs a CUDA build"); always true in a CUDA build.
inline void check_device_built(const char* op, const Device& device) {
#ifndef DDP_WITH_CUDA
  DDP_CHECK(device.is_cpu(), op, " on ", device.str(), " needs a CUDA build (DDP_CUDA=ON)");
#else
  (void)op;
  (void)device;
#endif
}
}  // namespace ddp::ops

#ifdef DDP_WITH_CUDA
#include "runtime/core/cuda/stream.h"

#define DDP_KERNEL(device, kernel, ...) \
  ((device).is_cuda() ? ::ddp::kernels::cuda::kernel(__VA_ARGS__) : ::ddp::kernels::cpu::kernel(__VA_ARGS__))
#define DDP_KERNEL_ON_STREAM(device, kernel, ...)                                                \
  ((device).is_cuda() ? ::ddp::kernels::cuda::kernel(__VA_ARGS__, ::ddp::cuda::current_stream()) \
                      : ::ddp::kernels::cpu::kernel(__VA_ARGS__))
#else
#define DDP_KERNEL(device, kernel, ...) \
  (::ddp::ops::check_device_built(#kernel, (device)), ::ddp::kernels::cpu::kernel(__VA_ARGS__))
#define DDP_KERNEL_ON_STREAM(device, kernel, ...) DDP_KERNEL(device, kernel, __VA_ARGS__)
#endif
