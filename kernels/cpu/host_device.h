// host_device.h - DDP_HOST_DEVICE marks an inline function that both the CPU code (g++) and the CUDA kernels
// (nvcc) compile, so a CPU test runs the arithmetic, plan or order a kernel runs (dropout's hash, index checks,
// the optimizers' per-element math, the flash-attention tiles, the column-sum plan).
#pragma once

#if defined(__CUDACC__)
#define DDP_HOST_DEVICE __host__ __device__
#else
#define DDP_HOST_DEVICE
#endif
