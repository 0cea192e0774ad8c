// reduce.cpp - forward and backward of the reductions. Forward sums through kernels/{cpu,cuda}/reduce
// (coalesced (outer, r, inner) passes); backward broadcasts the gradient back with expand_dims.
#include "runtime/ops/reduce.h"

#include <limits>

#include "kernels/cpu/reduce.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/reduce.h"
#endif

namespace ddp::ops {
namespace {
template <class T>
void sum_dims_on(Device dev, const T* x, const Shape& shape, const std::vector<bool>& mask, T* out,
                 double scale) {
  DDP_KERNEL(dev, sum_dims, x, shape, mask, out, scale);
}

template <class T>
void expand_dims_on(Device dev, const T* g, const Shape& shape, const std::vector<bool>& mask, T* out,
                    double scale) {
  DDP_KERNEL(dev, expand_dims, g, shape, mask, out, scale);
}

struct SumBackward final : autograd::Node {
  Shape in_shape;
  std::vector<bool> mask;  // reduced dimensions
  double scale = 1.0;      // 1 for sum, 1/count for mean
  const char* op = "sum";
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    if (!g.defined()) return {};
    Tensor dx = Tensor::empty(in_shape, g.dtype(), g.device());
    DDP_DISPATCH_FLOATING(g.dtype(), op, [&] {
      expand_dims_on(g.device(), g.data<scalar_t>(), in_shape, mask, dx.data<scalar_t>(), scale);
    });
    return {dx};
  }
  const char* name() const override { return op; }
};

// The shared forward: out_shape is the result shape, mask the reduced dimensions of x.
Tensor reduce(const char* op, const Tensor& x, const std::vector<bool>& mask, const Shape& out_shape,
              double scale) {
  check_device_built(op, x.device());
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  DDP_DISPATCH_FLOATING(x.dtype(), op, [&] {
    sum_dims_on(x.device(), x.data<scalar_t>(), x.shape(), mask, out.data<scalar_t>(), scale);
  });
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SumBackward>();
    node->in_shape = x.shape();
    node->mask = mask;
    node->scale = scale;
    node->op = op;
    autograd::record(node, {&x}, {&out});
  }
  return out;
}

// Validates dims and returns the reduced-dimension mask; count = number of elements summed per output.
std::vector<bool> reduce_mask(const char* op, const Tensor& x, const std::vector<int64_t>& dims,
                              int64_t* count) {
  const int64_t nd = x.dim();
  std::vector<bool> mask(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims) {
    const int64_t nd_ok = d < 0 ? d + nd : d;
    DDP_CHECK(nd_ok >= 0 && nd_ok < nd, op, ": dimension ", d, " is out of range for a tensor of shape ",
              shape_str(x.shape()), " (valid: ", -nd, " to ", nd - 1, ")");
    DDP_CHECK(!mask[nd_ok], op, ": dimension ", d, " appears twice in the list of dimensions");
    mask[nd_ok] = true;
  }
  *count = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (mask[d]) *count *= x.shape()[d];
  return mask;
}

// 1/count; the mean of nothing (count 0) is NaN, as in PyTorch: a sum of 0 times a NaN scale.
double mean_scale(int64_t count) {
  return count > 0 ? 1.0 / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
}

Shape reduced_shape(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  Shape s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[d])
      s.push_back(x.shape()[d]);
    else if (keepdim)
      s.push_back(1);
  }
  return s;
}
}  // namespace

Tensor sum(const Tensor& x) {
  DDP_CHECK(x.defined(), "sum: input is undefined");
  return reduce("sum", x, std::vector<bool>(x.shape().size(), true), {}, 1.0);
}
Tensor mean(const Tensor& x) {
  DDP_CHECK(x.defined(), "mean: input is undefined");
  return reduce("mean", x, std::vector<bool>(x.shape().size(), true), {}, mean_scale(x.numel()));
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DDP_CHECK(x.defined(), "sum: input is undefined");
  int64_t count;
  std::vector<bool> mask = reduce_mask("sum", x, dims, &count);
  return reduce("sum", x, mask, reduced_shape(x, mask, keepdim), 1.0);
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DDP_CHECK(x.defined(), "mean: input is undefined");
  int64_t count;
  std::vector<bool> mask = reduce_mask("mean", x, dims, &count);
  return reduce("mean", x, mask, reduced_shape(x, mask, keepdim), mean_scale(count));
}

}  // namespace ddp::ops
