// convert.cu - elementwise dtype conversion and fill kernels (float32, float64,
// bfloat16, int32, int64, uint8).
#include <cuda_bf16.h>

#include "kernels/cuda/convert.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
__device__ double load_as_double(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(p)[i];
    case DType::F64:
      return static_cast<const double*>(p)[i];
    case DType::BF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::I32:
      return static_cast<const int32_t*>(p)[i];
    case DType::I64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::U8:
      return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}
__device__ void store_from_double(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::F64:
      static_cast<double*>(p)[i] = v;
      break;
    case DType::BF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(static_cast<float>(v));
      break;
    case DType::I32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::I64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DType::U8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
  }
}
__global__ void convert_kernel(const void* src, DType st, void* dst, DType dt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store_from_double(dst, dt, i, load_as_double(src, st, i));
}
__global__ void fill_kernel(void* dst, DType dt, double v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store_from_double(dst, dt, i, v);
}
int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535)); }
}  // namespace

void convert(const void* src, DType st, void* dst, DType dt, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n), 256, 0, stream>>>(src, st, dst, dt, n);
  DDP_CUDA_CHECK_LAUNCH();
}
void fill(void* dst, DType dt, double v, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), 256, 0, stream>>>(dst, dt, v, n);
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace ddp::kernels::cuda
