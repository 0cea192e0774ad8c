// peak_flops.cpp - the datasheet table behind MFU, and the GPU's name.
#include "runtime/core/peak_flops.h"

#ifdef DDP_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ddp {

PeakFlops datasheet_peak(const std::string& gpu_name, bool bf16, bool tf32) {
  for (const char* model : {"H200", "H100"}) {
    // SXM parts (the "NVL"/"PCIe" variants have lower clocks and other figures: not in the table).
    if (gpu_name.find(model) != std::string::npos && gpu_name.find("PCIe") == std::string::npos &&
        gpu_name.find("NVL") == std::string::npos) {
      const std::string sheet = std::string("NVIDIA ") + model + " SXM datasheet, ";
      if (bf16) return {989, sheet + "BF16 Tensor Core dense"};
      if (tf32) return {494.5, sheet + "TF32 Tensor Core dense"};  // 989 "with sparsity", halved
      return {67, sheet + "FP32"};
    }
  }
  return {};
}

std::string cuda_device_name(int device) {
#ifdef DDP_WITH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) return prop.name;
  cudaGetLastError();
#else
  (void)device;
#endif
  return "";
}

}  // namespace ddp
