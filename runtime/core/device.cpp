// device.cpp - device parsing and GPU discovery; CUDA runtime errors at discovery mean "no GPU".
#include "runtime/core/device.h"

#include "runtime/core/error.h"

#ifdef DDP_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ddp {

namespace {
struct CudaProbe {
  int count = 0;
  std::string reason;
  CudaProbe() {
#ifdef DDP_WITH_CUDA
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      reason = std::string("CUDA runtime: ") + cudaGetErrorString(err);
      cudaGetLastError();  // clear the sticky error so later calls are not poisoned
      count = 0;
    } else {
      count = n;
      if (n == 0) reason = "CUDA runtime reports no device";
    }
#else
    reason = "built without CUDA (DDP_CUDA=OFF or no nvcc found)";
#endif
  }
};
const CudaProbe& probe() {
  static CudaProbe p;
  return p;
}
}  // namespace

bool cuda_compiled() {
#ifdef DDP_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() { return probe().count; }
std::string cuda_unavailable_reason() { return probe().reason; }

int current_cuda_device() {
#ifdef DDP_WITH_CUDA
  int d = 0;
  if (cuda_device_count() > 0 && cudaGetDevice(&d) == cudaSuccess) return d;
#endif
  return 0;
}

void device_synchronize() {
#ifdef DDP_WITH_CUDA
  if (cuda_device_count() == 0) return;
  cudaError_t err = cudaDeviceSynchronize();
  DDP_CHECK(err == cudaSuccess, "cudaDeviceSynchronize failed: ", cudaGetErrorString(err));
#endif
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "auto") return cuda_device_count() > 0 ? cuda(0) : cpu();
  if (s == "cuda" || s.rfind("cuda:", 0) == 0) {
    int idx = 0;
    if (s.size() > 5) {
      try {
        idx = std::stoi(s.substr(5));
      } catch (...) {
        DDP_FAIL("device '", s, "': expected cpu, cuda, cuda:N or auto");
      }
    }
    DDP_CHECK(cuda_device_count() > idx, "device '", s, "' requested but only ", cuda_device_count(),
              " GPU(s) are usable (", cuda_unavailable_reason(), "); use --device cpu or auto");
    return cuda(idx);
  }
  DDP_FAIL("device '", s, "': expected cpu, cuda, cuda:N or auto");
}

}  // namespace ddp
