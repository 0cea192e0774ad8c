// convert.cu - elementwise dtype conversion (one kernel per type pair, converting as the CPU does; 16 bytes
// per access of the wider type where the pointers allow, vector_access.cuh), fill and arange kernels
// (float32, float64, bfloat16, int32, int64, uint8).
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/vector_access.cuh"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
// One element from S to D as the CPU converts it (runtime/tensor/tensor.cpp's host_convert: a static_cast,
// bfloat16 through float32 on either side) - never through double, which would round an int64 above 2^53 and
// round int64 -> float32 twice.
template <class D, class S>
__device__ D convert_value(S v) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return convert_value<D>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

// One kernel per (source, destination) type pair (map_elements: 32-bit index math when n fits).
template <class S, class D>
struct ConvertTo {
  __device__ D operator()(S v) const { return convert_value<D>(v); }
};

// Calls f(T{}) with the C++ type of dtype t (a null pointer of it, to carry the type).
template <class F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(static_cast<float*>(nullptr));
    case DType::F64: return f(static_cast<double*>(nullptr));
    case DType::BF16: return f(static_cast<__nv_bfloat16*>(nullptr));
    case DType::I32: return f(static_cast<int32_t*>(nullptr));
    case DType::I64: return f(static_cast<int64_t*>(nullptr));
    case DType::U8: return f(static_cast<uint8_t*>(nullptr));
  }
  DDP_FAIL("cuda convert: unknown dtype ", static_cast<int>(t));
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
__global__ void fill_kernel(void* dst, DType dt, double v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store_from_double(dst, dt, i, v);
}
__global__ void arange_kernel(void* dst, DType dt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_from_double(dst, dt, i, static_cast<double>(i));
}
}  // namespace

void convert(const void* src, DType st, void* dst, DType dt, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_type(st, [&](auto* s_type) {
    with_type(dt, [&](auto* d_type) {
      using S = std::remove_pointer_t<decltype(s_type)>;
      using D = std::remove_pointer_t<decltype(d_type)>;
      map_elements(n, stream, ConvertTo<S, D>{}, static_cast<D*>(dst), static_cast<const S*>(src));
    });
  });
}
void fill(void* dst, DType dt, double v, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kBlock, 0, stream>>>(dst, dt, v, n);
  DDP_CUDA_CHECK_LAUNCH();
}
void arange(void* dst, DType dt, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  arange_kernel<<<grid_for(n), kBlock, 0, stream>>>(dst, dt, n);
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace ddp::kernels::cuda
