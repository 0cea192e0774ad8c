// linalg.cpp - forward and backward of matmul and linear, side by side, on top of the gemm kernels
// (kernels/cpu/gemm.h: OpenBLAS; kernels/cuda/gemm.h: cuBLAS).
//
// Backward of C = A B: dA = dC B^T, dB = A^T dC (transpose flags only).
// Backward of y = x W^T + b over R = (all leading dims of x) rows: dx = g W, dW = g^T x (one GEMM over all R
// rows), db = column sums of g.
#include "runtime/ops/linalg.h"

#include <algorithm>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/reduce.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"
#include "runtime/ops/mixed_precision.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/reduce.h"
#endif

namespace ddp::ops {
namespace {

// ---- device dispatch of the kernels (same names on CPU and CUDA) ----
template <class T>
void gemm_on(Device dev, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B,
             T beta, T* C) {
  DDP_KERNEL(dev, gemm, ta, tb, M, N, K, alpha, A, B, beta, C);
}

template <class T>
void gemm_batched_on(Device dev, bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const T* A,
                     int64_t sa, const T* B, int64_t sb, T* C, int64_t sc) {
  DDP_KERNEL(dev, gemm_batched, ta, tb, batch, M, N, K, T(1), A, sa, B, sb, T(0), C, sc);
}

template <class T>
void fill_rows_on(Device dev, const T* bias, int64_t rows, int64_t n, T* out) {
  DDP_KERNEL(dev, fill_rows, bias, rows, n, out);
}

// out (n) = sum over rows of g (rows, n)
template <class T>
void column_sums_on(Device dev, const T* g, int64_t rows, int64_t n, T* out) {
  DDP_KERNEL(dev, sum_middle, g, 1, rows, n, out, 1.0);
}

void check_pair(const char* op, const char* na, const Tensor& a, const char* nb, const Tensor& b) {
  DDP_CHECK(a.defined() && b.defined(), op, ": ", a.defined() ? nb : na, " is undefined");
  DDP_CHECK(a.dtype() == b.dtype(), op, ": ", na, " is ", dtype_name(a.dtype()), " but ", nb, " is ",
            dtype_name(b.dtype()), "; convert one with .to(dtype)");
  DDP_CHECK(a.device() == b.device(), op, ": ", na, " is on ", a.device().str(), " but ", nb, " is on ",
            b.device().str(), "; move one with .to(device)");
  check_device_built(op, a.device());
}

Shape with_last(const Shape& s, int64_t last) {
  Shape out = s;
  out.back() = last;
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// matmul
struct MatmulBackward final : autograd::Node {
  Tensor a, b;  // a saved when b needs a gradient, b when a does
  int64_t batch = 1, M = 0, K = 0, N = 0;
  bool shared_b = false;  // b is 2-D and was folded into one GEMM over all rows of a
  Shape a_shape, b_shape;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    if (!g.defined()) return {};
    Tensor ga, gb;
    const Device dev = g.device();
    DDP_DISPATCH_FLOATING(g.dtype(), "matmul backward", [&] {
      const scalar_t* pg = g.data<scalar_t>();
      if (next_edges[0].valid()) {  // dA = g B^T
        ga = Tensor::empty(a_shape, g.dtype(), dev);
        if (shared_b) {
          gemm_on<scalar_t>(dev, false, true, batch * M, K, N, 1, pg, b.data<scalar_t>(), 0,
                            ga.data<scalar_t>());
        } else {
          gemm_batched_on<scalar_t>(dev, false, true, batch, M, K, N, pg, M * N, b.data<scalar_t>(), K * N,
                                    ga.data<scalar_t>(), M * K);
        }
      }
      if (next_edges[1].valid()) {  // dB = A^T g
        gb = Tensor::empty(b_shape, g.dtype(), dev);
        if (shared_b) {
          gemm_on<scalar_t>(dev, true, false, K, N, batch * M, 1, a.data<scalar_t>(), pg, 0,
                            gb.data<scalar_t>());
        } else {
          gemm_batched_on<scalar_t>(dev, true, false, batch, K, N, M, a.data<scalar_t>(), M * K, pg, M * N,
                                    gb.data<scalar_t>(), K * N);
        }
      }
    });
    return {ga, gb};
  }
  const char* name() const override { return "matmul"; }
  void release_saved() override { a = b = Tensor(); }
};
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_pair("matmul", "a", a, "b", b);
  DDP_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: a ", shape_str(a.shape()), " and b ", shape_str(b.shape()),
            " must both have at least 2 dimensions; use reshape/unsqueeze for vectors");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  DDP_CHECK(b.size(-2) == K, "matmul: inner dimensions differ: a ", shape_str(a.shape()), " has K = ", K,
            " but b ", shape_str(b.shape()), " has ", b.size(-2), " rows");
  const bool shared_b = b.dim() == 2;
  int64_t batch = 1;
  for (int64_t d = 0; d + 2 < a.dim(); ++d) batch *= a.shape()[d];
  if (!shared_b) {
    DDP_CHECK(a.dim() == b.dim() && std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin()),
              "matmul: batch dimensions differ: a ", shape_str(a.shape()), " vs b ", shape_str(b.shape()),
              "; batched matmul needs equal leading dimensions (or a 2-D b shared by all)");
  }
  if (use_bf16_compute(a) && batch * M * N * K > 0)
    return detail::matmul_bf16(a, b, batch, M, K, N, shared_b);
  Tensor out = Tensor::empty(with_last(a.shape(), N), a.dtype(), a.device());
  const Device dev = a.device();
  DDP_DISPATCH_FLOATING(a.dtype(), "matmul", [&] {
    const scalar_t* pa = a.data<scalar_t>();
    const scalar_t* pb = b.data<scalar_t>();
    scalar_t* po = out.data<scalar_t>();
    if (shared_b) {
      gemm_on<scalar_t>(dev, false, false, batch * M, N, K, 1, pa, pb, 0, po);
    } else {
      gemm_batched_on<scalar_t>(dev, false, false, batch, M, N, K, pa, M * K, pb, K * N, po, M * N);
    }
  });
  if (autograd::needs_grad({&a, &b})) {
    auto node = std::make_shared<MatmulBackward>();
    node->batch = batch;
    node->M = M;
    node->K = K;
    node->N = N;
    node->shared_b = shared_b;
    node->a_shape = a.shape();
    node->b_shape = b.shape();
    if (b.requires_grad()) node->a = a;
    if (a.requires_grad()) node->b = b;
    autograd::record(node, {&a, &b}, {&out});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// linear
namespace {
struct LinearBackward final : autograd::Node {
  Tensor x, weight;  // x saved when weight needs a gradient, weight when x does
  Shape x_shape;
  int64_t rows = 0, in = 0, out = 0;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];  // (rows, out)
    if (!g.defined()) return {};
    Tensor gx, gw, gb;
    const Device dev = g.device();
    DDP_DISPATCH_FLOATING(g.dtype(), "linear backward", [&] {
      const scalar_t* pg = g.data<scalar_t>();
      if (next_edges[0].valid()) {  // dx (rows, in) = g (rows, out) W (out, in)
        gx = Tensor::empty(x_shape, g.dtype(), dev);
        gemm_on<scalar_t>(dev, false, false, rows, in, out, 1, pg, weight.data<scalar_t>(), 0,
                          gx.data<scalar_t>());
      }
      if (next_edges[1].valid()) {  // dW (out, in) = g^T (out, rows) x (rows, in)
        // Straight into the weight's DDP bucket slot where the reducer offers it (autograd/node.h).
        gw = autograd::gradient_destination_or_empty(next_edges[1], {out, in}, g.dtype(), dev);
        gemm_on<scalar_t>(dev, true, false, out, in, rows, 1, pg, x.data<scalar_t>(), 0, gw.data<scalar_t>());
      }
      if (next_edges.size() > 2 && next_edges[2].valid()) {  // db (out) = column sums of g
        gb = autograd::gradient_destination_or_empty(next_edges[2], {out}, g.dtype(), dev);
        column_sums_on<scalar_t>(dev, pg, rows, out, gb.data<scalar_t>());
      }
    });
    return {gx, gw, gb};
  }
  const char* name() const override { return "linear"; }
  void release_saved() override { x = weight = Tensor(); }
};

Tensor linear_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, bool bf16_output) {
  // A bfloat16 x (a bf16 op's output under bf16 compute: the GPT's attention) meets float32 master weights.
  const bool bf16_x = x.defined() && x.dtype() == DType::BF16;
  if (bf16_x) {
    DDP_CHECK(weight.defined() && weight.dtype() == DType::F32,
              "linear: x is bfloat16, so weight must be float32 ",
              "(bf16 compute keeps float32 master weights); got ",
              weight.defined() ? dtype_name(weight.dtype()) : std::string_view("an undefined weight"));
    DDP_CHECK(x.device() == weight.device(), "linear: x is on ", x.device().str(), " but weight is on ",
              weight.device().str(), "; move one with .to(device)");
    check_device_built("linear", x.device());
  } else {
    check_pair("linear", "x", x, "weight", weight);
  }
  DDP_CHECK(weight.dim() == 2, "linear: weight has shape ", shape_str(weight.shape()),
            "; expected (out_features, in_features)");
  const int64_t out_f = weight.shape()[0], in_f = weight.shape()[1];
  DDP_CHECK(x.dim() >= 1 && x.size(-1) == in_f, "linear: x has shape ", shape_str(x.shape()), " but weight ",
            shape_str(weight.shape()), " expects a last dimension of ", in_f);
  if (bias.defined()) {
    check_pair("linear", "weight", weight, "bias", bias);
    DDP_CHECK(bias.dim() == 1 && bias.shape()[0] == out_f, "linear: bias has shape ", shape_str(bias.shape()),
              "; expected (", out_f, ",) to match weight ", shape_str(weight.shape()));
  }
  const int64_t rows =
      in_f > 0 ? x.numel() / in_f : shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  if (bf16_x)
    DDP_CHECK(in_f > 0, "linear: a bfloat16 x needs in_features > 0; got weight ", shape_str(weight.shape()));
  // Zero-size products stay on the float32 path, but for a bf16 output (which must be bf16 even when empty).
  if (bf16_x || (use_bf16_compute(x) && in_f > 0 && (bf16_output || rows * out_f > 0)))
    return detail::linear_bf16(x, weight, bias, rows, bf16_output);
  Tensor y = Tensor::empty(with_last(x.shape(), out_f), x.dtype(), x.device());
  const Device dev = x.device();
  DDP_DISPATCH_FLOATING(x.dtype(), "linear", [&] {
    scalar_t* py = y.data<scalar_t>();
    if (bias.defined()) fill_rows_on(dev, bias.data<scalar_t>(), rows, out_f, py);
    gemm_on<scalar_t>(dev, false, true, rows, out_f, in_f, 1, x.data<scalar_t>(), weight.data<scalar_t>(),
                      bias.defined() ? 1 : 0, py);
  });
  if (autograd::needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<LinearBackward>();
    node->x_shape = x.shape();
    node->rows = rows;
    node->in = in_f;
    node->out = out_f;
    if (weight.requires_grad()) node->x = x;
    if (x.requires_grad()) node->weight = weight;
    autograd::record(node, {&x, &weight, &bias}, {&y});
  }
  return y;
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_impl(x, weight, bias, false);
}
Tensor linear_bf16_output(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_impl(x, weight, bias, true);
}

}  // namespace ddp::ops
