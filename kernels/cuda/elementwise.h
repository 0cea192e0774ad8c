// elementwise.h - the GPU side of runtime/ops/elementwise: broadcasting binary ops, y = alpha x + beta, and
// the sum_to_shape reduction of their backward (same meaning as kernels/cpu/broadcast.h's functions).
// float and double; launched on ddp::cuda::current_stream().
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace ddp::kernels::cuda {

using Dims = std::vector<int64_t>;
enum class BinaryOp { Add, Sub, Mul, Div };

// out (osh) = op(a (ash), b (bsh)) with NumPy broadcasting (osh is the broadcast shape).
template <class T>
void binary_broadcast(BinaryOp op, const T* a, const Dims& ash, const T* b, const Dims& bsh, T* out,
                      const Dims& osh);
// y = alpha * x + beta over n elements.
template <class T>
void affine(const T* x, T* y, int64_t n, double alpha, double beta);
// out (osh, broadcastable to gsh) = sum of g (gsh) over the broadcast dimensions.
template <class T>
void sum_to_shape(const T* g, const Dims& gsh, T* out, const Dims& osh);

}  // namespace ddp::kernels::cuda
