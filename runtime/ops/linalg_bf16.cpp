// linalg_bf16.cpp - the bf16-compute paths of matmul and linear (rounding points in mixed_precision.h):
// operands become bf16 tensors (saved as such for the backward, half the memory), GEMMs multiply bf16 with
// float32 accumulation into float32 (kernels/{cpu,cuda}/bf16: gemm_bf16), and every product is rounded.
// Weights (linear's weight, matmul's b when it is a parameter) come from ops::bf16_weight: converted once per
// optimizer step inside a Bf16WeightCast scope (bf16_weight_cast.h), else on every call.
// Forward and backward side by side, as in linalg.cpp; the shapes were checked by ops::matmul / ops::linear,
// which keep zero-size products on the float32 path.
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/reduce.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "runtime/ops/mixed_precision.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/linear_bf16.h"
#include "kernels/cuda/reduce.h"
#include "runtime/ops/cuda_workspace.h"
#endif

namespace ddp::ops {
namespace {

void gemm_bf16_on(Device dev, bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K,
                  const Tensor& A, int64_t sa, const Tensor& B, int64_t sb, float beta, float* C,
                  int64_t sc) {
#ifdef DDP_WITH_CUDA
  if (dev.is_cuda())
    return kernels::cuda::gemm_bf16(ta, tb, batch, M, N, K, 1.f, A.data<BFloat16>(), sa, B.data<BFloat16>(),
                                    sb, beta, C, sc);
#endif
  (void)dev;
  kernels::cpu::gemm_bf16(ta, tb, batch, M, N, K, 1.f, A.data<BFloat16>(), sa, B.data<BFloat16>(), sb, beta,
                          C, sc);
}

void round_in_place(Tensor& t) {
#ifdef DDP_WITH_CUDA
  if (t.device().is_cuda()) return kernels::cuda::round_to_bf16(t.data<float>(), t.numel());
#endif
  kernels::cpu::round_to_bf16(t.data<float>(), t.numel());
}

void fill_rows_f32(Device dev, const float* bias, int64_t rows, int64_t n, float* out) {
#ifdef DDP_WITH_CUDA
  if (dev.is_cuda()) return kernels::cuda::fill_rows(bias, rows, n, out);
#endif
  (void)dev;
  kernels::cpu::fill_rows(bias, rows, n, out);
}

// C (M, N) bf16 = round(op(A) op(B)), one product.
void gemm_bf16_to_bf16_on(Device dev, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& A,
                          const Tensor& B, Tensor& C) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum
    C.zero_();
    return;
  }
#ifdef DDP_WITH_CUDA
  if (dev.is_cuda())
    return kernels::cuda::gemm_bf16_to_bf16(ta, tb, M, N, K, A.data<BFloat16>(), B.data<BFloat16>(),
                                            C.data<BFloat16>());
#endif
  (void)dev;
  kernels::cpu::gemm_bf16_to_bf16(ta, tb, M, N, K, A.data<BFloat16>(), B.data<BFloat16>(),
                                  C.data<BFloat16>());
}

// ---- matmul: C = A B (batched, or b shared by all rows of a) ----
struct MatmulBf16Backward final : autograd::Node {
  Tensor a, b;  // bf16: a saved when b needs a gradient, b when a does
  int64_t batch = 1, M = 0, K = 0, N = 0;
  bool shared_b = false;
  Shape a_shape, b_shape;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {};
    const Tensor g = to_bf16(grads[0]);
    const Device dev = g.device();
    Tensor ga, gb;
    if (next_edges[0].valid()) {  // dA = g B^T
      ga = Tensor::empty(a_shape, DType::F32, dev);
      if (shared_b)
        gemm_bf16_on(dev, false, true, 1, batch * M, K, N, g, 0, b, 0, 0.f, ga.data<float>(), 0);
      else
        gemm_bf16_on(dev, false, true, batch, M, K, N, g, M * N, b, K * N, 0.f, ga.data<float>(), M * K);
      round_in_place(ga);
    }
    if (next_edges[1].valid()) {  // dB = A^T g
      gb = Tensor::empty(b_shape, DType::F32, dev);
      if (shared_b)
        gemm_bf16_on(dev, true, false, 1, K, N, batch * M, a, 0, g, 0, 0.f, gb.data<float>(), 0);
      else
        gemm_bf16_on(dev, true, false, batch, K, N, M, a, M * K, g, M * N, 0.f, gb.data<float>(), K * N);
      round_in_place(gb);
    }
    return {ga, gb};
  }
  const char* name() const override { return "matmul_bf16"; }
  void release_saved() override { a = b = Tensor(); }
};

// ---- linear: y = x W^T + b over `rows` rows ----
struct LinearBf16Backward final : autograd::Node {
  Tensor x, weight;  // bf16
  Shape x_shape;
  int64_t rows = 0, in = 0, out = 0;
  bool x_bf16 = false;  // x was a bfloat16 tensor: its gradient is one too (rounded by the GEMM)
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {};
    // (rows, out); already bf16 behind a bf16 output (the loss's gradient, a bf16 GEMM's dx)
    const Tensor g = to_bf16(grads[0]);
    const Device dev = g.device();
    Tensor gx, gw, gb;
    if (next_edges[0].valid()) {  // dx (rows, in) = g W
      if (x_bf16) {
        gx = Tensor::empty(x_shape, DType::BF16, dev);
        gemm_bf16_to_bf16_on(dev, false, false, rows, in, out, g, weight, gx);
      } else {
        gx = Tensor::empty(x_shape, DType::F32, dev);
        gemm_bf16_on(dev, false, false, 1, rows, in, out, g, 0, weight, 0, 0.f, gx.data<float>(), 0);
        round_in_place(gx);
      }
    }
    // dW (out, in) = g^T x, straight into the weight's DDP bucket slot where the reducer offers one
    if (next_edges[1].valid()) {
      if (rows == 0) {  // an empty sum (the GEMM takes no K = 0)
        gw = Tensor::zeros({out, in}, DType::F32, dev);
      } else {
        gw = autograd::gradient_destination_or_empty(next_edges[1], {out, in}, DType::F32, dev);
        gemm_bf16_on(dev, true, false, 1, out, in, rows, g, 0, x, 0, 0.f, gw.data<float>(), 0);
        round_in_place(gw);
      }
    }
    if (next_edges.size() > 2 && next_edges[2].valid()) {  // db = column sums of the rounded gradient
      gb = autograd::gradient_destination_or_empty(next_edges[2], {out}, DType::F32, dev);
      detail::bias_gradient_bf16(g, rows, out, gb.data<float>());
    }
    return {gx, gw, gb};
  }
  const char* name() const override { return "linear_bf16"; }
  void release_saved() override { x = weight = Tensor(); }
};

Shape with_last(const Shape& s, int64_t last) {
  Shape o = s;
  o.back() = last;
  return o;
}
}  // namespace

namespace {
// y = xb wb^T (+ bias) rounded to bf16 once: a float32 tensor holding the values, or (bf16_output) a bf16
// one. Without a bias the GEMM rounds on its way out; with one, a float32 product is converted: cuBLASLt's
// bias epilogue refuses a float32 bias with a bf16 D (CUBLAS_STATUS_INVALID_VALUE on the H200, 2026-12-04),
// and a bf16 bias would round the bias before the sum.
Tensor linear_product_bf16(const Tensor& xb, const Tensor& wb, const Tensor& bias, int64_t rows,
                           const Shape& y_shape, bool bf16_output) {
  const int64_t out_f = wb.size(0), in_f = wb.size(1);
  const Device dev = xb.device();
  if (bf16_output && !bias.defined()) {
    Tensor y = Tensor::empty(y_shape, DType::BF16, dev);
    gemm_bf16_to_bf16_on(dev, false, true, rows, out_f, in_f, xb, wb, y);
    return y;
  }
  Tensor y = Tensor::empty(y_shape, DType::F32, dev);
  detail::linear_gemm_bf16(xb, wb, bias, rows, out_f, in_f, y.data<float>());
  if (bf16_output) return to_bf16(y);  // the same rounding, one pass
  round_in_place(y);
  return y;
}

}  // namespace

Tensor detail::matmul_bf16(const Tensor& a, const Tensor& b, int64_t batch, int64_t M, int64_t K, int64_t N,
                           bool shared_b) {
  const Device dev = a.device();
  // b through the step's weight cache when it is a parameter (bf16_weight_cast.h); a is an activation.
  Tensor ab = to_bf16(a), bb = b.is_leaf() && b.requires_grad() ? bf16_weight(b) : to_bf16(b);
  Tensor out = Tensor::empty(with_last(a.shape(), N), DType::F32, dev);
  if (shared_b)
    gemm_bf16_on(dev, false, false, 1, batch * M, N, K, ab, 0, bb, 0, 0.f, out.data<float>(), 0);
  else
    gemm_bf16_on(dev, false, false, batch, M, N, K, ab, M * K, bb, K * N, 0.f, out.data<float>(), M * N);
  round_in_place(out);
  if (autograd::needs_grad({&a, &b})) {
    auto node = std::make_shared<MatmulBf16Backward>();
    node->batch = batch;
    node->M = M;
    node->K = K;
    node->N = N;
    node->shared_b = shared_b;
    node->a_shape = a.shape();
    node->b_shape = b.shape();
    if (b.requires_grad()) node->a = ab;
    if (a.requires_grad()) node->b = bb;
    autograd::record(node, {&a, &b}, {&out});
  }
  return out;
}

void detail::linear_gemm_bf16(const Tensor& xb, const Tensor& wb, const Tensor& bias, int64_t rows,
                              int64_t out, int64_t in, float* y) {
  if (rows == 0 || out == 0) return;
  const Device dev = xb.device();
#ifdef DDP_WITH_CUDA
  if (dev.is_cuda() && bias.defined()) {
    CudaWorkspace ws{dev, {}};
    if (kernels::cuda::linear_bias_bf16(rows, out, in, xb.data<BFloat16>(), wb.data<BFloat16>(),
                                        bias.data<float>(), y, ws.fn()))
      return;
  }
#endif
  if (bias.defined()) fill_rows_f32(dev, bias.data<float>(), rows, out, y);
  gemm_bf16_on(dev, false, true, 1, rows, out, in, xb, 0, wb, 0, bias.defined() ? 1.f : 0.f, y, 0);
}

void detail::bias_gradient_bf16(const Tensor& gb, int64_t rows, int64_t n, float* out) {
  const Device dev = gb.device();
#ifdef DDP_WITH_CUDA
  if (dev.is_cuda()) {
    kernels::cuda::sum_middle(gb.data<BFloat16>(), 1, rows, n, out, 1.0);
    return kernels::cuda::round_to_bf16(out, n);
  }
#endif
  const Tensor g32 = gb.to(DType::F32);
  kernels::cpu::sum_middle(g32.data<float>(), 1, rows, n, out, 1.0);
  kernels::cpu::round_to_bf16(out, n);
}

Tensor detail::linear_bf16(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t rows,
                           bool bf16_output) {
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  Tensor xb = to_bf16(x), wb = bf16_weight(weight);  // one copy per step inside a Bf16WeightCast scope
  Tensor y = linear_product_bf16(xb, wb, bias, rows, with_last(x.shape(), out_f), bf16_output);
  if (autograd::needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<LinearBf16Backward>();
    node->x_shape = x.shape();
    node->rows = rows;
    node->in = in_f;
    node->out = out_f;
    node->x_bf16 = x.dtype() == DType::BF16;
    if (weight.requires_grad()) node->x = xb;
    if (x.requires_grad()) node->weight = wb;
    autograd::record(node, {&x, &weight, &bias}, {&y});
  }
  return y;
}

}  // namespace ddp::ops
