// axpy.cu - y = beta*y + alpha*x, 16 bytes per access where the pointers allow (vector_access.cuh); beta == 0
// never reads y (so y may be uninitialised).
#include <cuda_bf16.h>

#include "kernels/cuda/axpy.h"
#include "kernels/cuda/vector_access.cuh"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
template <class T, class Acc>
struct Scale {  // beta == 0: alpha * x
  Acc alpha;
  __device__ T operator()(T x) const { return static_cast<T>(alpha * static_cast<Acc>(x)); }
};
template <class T, class Acc>
struct Axpby {  // alpha * x + beta * y, in that order
  Acc beta, alpha;
  __device__ T operator()(T x, T y) const {
    Acc v = alpha * static_cast<Acc>(x);
    v += beta * static_cast<Acc>(y);
    return static_cast<T>(v);
  }
};

template <class T, class Acc>
void launch(T* y, const T* x, Acc beta, Acc alpha, int64_t n, cudaStream_t stream) {
  if (beta == Acc(0))
    map_elements(n, stream, Scale<T, Acc>{alpha}, y, x);
  else
    map_elements(n, stream, Axpby<T, Acc>{beta, alpha}, y, x, static_cast<const T*>(y));
}
}  // namespace

void axpby(void* y, const void* x, DType dtype, double beta, double alpha, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  switch (dtype) {
    case DType::F32:
      return launch(static_cast<float*>(y), static_cast<const float*>(x), float(beta), float(alpha), n,
                    stream);
    case DType::F64:
      return launch(static_cast<double*>(y), static_cast<const double*>(x), beta, alpha, n, stream);
    case DType::BF16:
      return launch(static_cast<__nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(x), float(beta),
                    float(alpha), n, stream);
    default:
      DDP_FAIL("axpby: dtype ", dtype_name(dtype), " not supported on CUDA");
  }
}
}  // namespace ddp::kernels::cuda
