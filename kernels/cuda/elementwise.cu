// elementwise.cu - broadcasting binary kernels (a same-shape fast path and an index-mapping general path over
// at most 16 dimensions), the affine scalar kernel, and sum_to_shape expressed as a reduction over the
// broadcast dimensions (kernels/cuda/reduce). The same-shape and affine kernels move 16 bytes per access
// where the pointers allow (vector_access.cuh).
#include "kernels/cpu/broadcast.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/vector_access.cuh"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
constexpr int kMaxDims = 16;

struct BroadcastPlan {
  int nd = 0;
  int64_t size[kMaxDims];
  int64_t stride_a[kMaxDims];
  int64_t stride_b[kMaxDims];
};

template <class T>
struct Apply {
  BinaryOp op;
  __device__ T operator()(T x, T y) const {
    switch (op) {
      case BinaryOp::Add:
        return x + y;
      case BinaryOp::Sub:
        return x - y;
      case BinaryOp::Mul:
        return x * y;
      case BinaryOp::Div:
        return x / y;
    }
    return T(0);
  }
};

// One operation fixed at compile time, for the same-shape map.
template <class T, BinaryOp OP>
struct ApplyOp {
  __device__ T operator()(T x, T y) const { return Apply<T>{OP}(x, y); }
};

template <class T, BinaryOp OP>
__global__ void broadcast_kernel(const T* a, const T* b, T* out, int64_t n, BroadcastPlan p) {
  const Apply<T> f{OP};
  DDP_CUDA_KERNEL_LOOP(i, n) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = p.nd - 1; d >= 0; --d) {
      const int64_t k = rest % p.size[d];
      rest /= p.size[d];
      ia += k * p.stride_a[d];
      ib += k * p.stride_b[d];
    }
    out[i] = f(a[ia], b[ib]);
  }
}

template <class T>
struct Affine {
  T alpha, beta;
  __device__ T operator()(T x) const { return alpha * x + beta; }
};

template <class T, BinaryOp OP>
void launch_binary(const T* a, const Dims& ash, const T* b, const Dims& bsh, T* out, const Dims& osh,
                   int64_t n) {
  cudaStream_t stream = ddp::cuda::current_stream();
  if (ash == osh && bsh == osh) {
    map_elements(n, stream, ApplyOp<T, OP>{}, out, a, b);
    return;
  }
  DDP_CHECK(osh.size() <= static_cast<size_t>(kMaxDims), "cuda broadcast: ", osh.size(),
            " dimensions; at most ", kMaxDims, " are supported");
  const Dims sa = cpu::broadcast_strides(ash, osh), sb = cpu::broadcast_strides(bsh, osh);
  BroadcastPlan p;
  p.nd = static_cast<int>(osh.size());
  for (int d = 0; d < p.nd; ++d) {
    p.size[d] = osh[d];
    p.stride_a[d] = sa[d];
    p.stride_b[d] = sb[d];
  }
  broadcast_kernel<T, OP><<<grid_for(n), kBlock, 0, stream>>>(a, b, out, n, p);
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace

template <class T>
void binary_broadcast(BinaryOp op, const T* a, const Dims& ash, const T* b, const Dims& bsh, T* out,
                      const Dims& osh) {
  int64_t n = 1;
  for (int64_t d : osh) n *= d;
  if (n == 0) return;
  switch (op) {
    case BinaryOp::Add:
      return launch_binary<T, BinaryOp::Add>(a, ash, b, bsh, out, osh, n);
    case BinaryOp::Sub:
      return launch_binary<T, BinaryOp::Sub>(a, ash, b, bsh, out, osh, n);
    case BinaryOp::Mul:
      return launch_binary<T, BinaryOp::Mul>(a, ash, b, bsh, out, osh, n);
    case BinaryOp::Div:
      return launch_binary<T, BinaryOp::Div>(a, ash, b, bsh, out, osh, n);
  }
}

template <class T>
void affine(const T* x, T* y, int64_t n, double alpha, double beta) {
  map_elements(n, ddp::cuda::current_stream(), Affine<T>{static_cast<T>(alpha), static_cast<T>(beta)}, y, x);
}

template <class T>
void sum_to_shape(const T* g, const Dims& gsh, T* out, const Dims& osh) {
  // osh, right-aligned against gsh: a dimension is summed where osh has 1 (or nothing) and gsh does not.
  std::vector<bool> reduced(gsh.size(), false);
  const size_t off = gsh.size() - osh.size();
  for (size_t d = 0; d < gsh.size(); ++d) {
    const int64_t od = d < off ? 1 : osh[d - off];
    reduced[d] = od == 1 && gsh[d] != 1;
  }
  sum_dims(g, gsh, reduced, out, 1.0);
}

#define DDP_INSTANTIATE_CUDA_ELEMENTWISE(T)                                                     \
  template void binary_broadcast<T>(BinaryOp, const T*, const Dims&, const T*, const Dims&, T*, \
                                    const Dims&);                                               \
  template void affine<T>(const T*, T*, int64_t, double, double);                               \
  template void sum_to_shape<T>(const T*, const Dims&, T*, const Dims&);
DDP_INSTANTIATE_CUDA_ELEMENTWISE(float)
DDP_INSTANTIATE_CUDA_ELEMENTWISE(double)
#undef DDP_INSTANTIATE_CUDA_ELEMENTWISE

}  // namespace ddp::kernels::cuda
