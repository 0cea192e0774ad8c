// peak_flops.cpp - the datasheet table behind MFU, and the GPU's name.
#include "runtime/core/peak_flops.h"

#ifdef DDP_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ddp {

PeakFlops datasheet_peak(const std::string& gpu_name, bool bf16) {
  for (const char* model : {"H200", "H100"}) {
    // SXM parts (the "NVL"/"PCIe" variants have lower clocks and other figures: not in the table).
    if (gpu_name.find(model) != std::string::npos && gpu_name.find("PCIe") == std::string::npos &&
        gpu_name.find("NVL") == std::string::npos) {
      return bf16 ? PeakFlops{989, std::string("NVIDIA ") + model + " SXM datasheet, BF16 Tensor Core dense"}
                  : PeakFlops{67, std::string("NVIDIA ") + model + " SXM datasheet, FP32"};
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
