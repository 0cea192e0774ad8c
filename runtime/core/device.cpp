// device.cpp - device parsing and GPU discovery; CUDA runtime errors at discovery mean "no GPU".
#include "runtime/core/device.h"

#include "runtime/core/error.h"

#ifdef DDP_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/core/cuda_check.h"
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

namespace {
// Device::parse against `count` usable GPUs (`reason`: why there are none).
Device parse_spec(const std::string& s, int count, const std::string& reason) {
  if (s == "cpu") return Device::cpu();
  if (s == "auto") return count > 0 ? Device::cuda(0) : Device::cpu();
  if (s == "cuda" || s.rfind("cuda:", 0) == 0) {
    int idx = 0;
    if (s.size() > 5) {
      try {
        idx = std::stoi(s.substr(5));
      } catch (...) {
        DDP_FAIL("device '", s, "': expected cpu, cuda, cuda:N or auto");
      }
    }
    DDP_CHECK(idx >= 0, "device '", s, "': the GPU index must be >= 0");
    DDP_CHECK(count > idx, "device '", s, "' requested but only ", count, " GPU(s) are usable",
              reason.empty() ? std::string() : " (" + reason + ")", "; use --device cpu or auto");
    return Device::cuda(idx);
  }
  DDP_FAIL("device '", s, "': expected cpu, cuda, cuda:N or auto");
}
}  // namespace

Device Device::parse(const std::string& s) {
  return parse_spec(s, cuda_device_count(), cuda_unavailable_reason());
}

Device device_for_rank(const std::string& spec, int local_rank, int gpu_count) {
  DDP_CHECK(local_rank >= 0, "device_for_rank: local rank ", local_rank, " is negative");
  Device d = parse_spec(spec, gpu_count, gpu_count > 0 ? std::string() : cuda_unavailable_reason());
  if (d.is_cpu() || spec.rfind("cuda:", 0) == 0) return d;  // the CPU, or an explicit index: as given
  return Device::cuda(local_rank % gpu_count);              // "cuda" or "auto": this local rank's GPU
}

void set_current_cuda_device(int index) {
#ifdef DDP_WITH_CUDA
  DDP_CHECK(index >= 0 && index < cuda_device_count(), "cuda:", index, " is not a usable GPU (",
            cuda_device_count(), " usable)");
  DDP_CUDA_CHECK(cudaSetDevice(index));
#else
  DDP_FAIL("cuda:", index, ": this build has no CUDA");
#endif
}

}  // namespace ddp
