// peak_flops.h - the peak throughput MFU (model FLOPs utilisation) is measured against, and where the figure
// comes from. Datasheet figures only (dense, no sparsity), never measured ones: NVIDIA's H100/H200 SXM
// datasheets give FP32 67 TFLOP/s, TF32 Tensor Core 989 and BF16 Tensor Core 1,979 TFLOP/s "with sparsity", i.e.
// 494.5 and 989 dense. float32 GEMMs use IEEE FMAs unless the matmul precision allows TF32 (core/float32_math.h):
// the FP32 figure applies to float32 runs by default, the TF32 one with TF32 on. Unknown GPUs (and
// CPUs) get 0: the programs then print no MFU unless --peak-tflops is given.
#pragma once
#include <string>

namespace ddp {

struct PeakFlops {
  double tflops = 0;   // 0: unknown
  std::string source;  // e.g. "NVIDIA H200 datasheet, BF16 Tensor Core dense"
};

// The datasheet peak for a GPU named `gpu_name` (cudaDeviceProp::name) computing in bf16, or in float32 with
// or without TF32 tensor cores.
PeakFlops datasheet_peak(const std::string& gpu_name, bool bf16, bool tf32 = false);
// cudaDeviceProp::name of `device`, "" without CUDA or on failure.
std::string cuda_device_name(int device);

}  // namespace ddp
