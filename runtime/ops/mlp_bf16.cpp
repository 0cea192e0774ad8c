// mlp_bf16.cpp - forward and backward of the fused bf16 MLP (mlp_bf16.h), side by side. The GELU GEMMs are
// kernels/{cpu,cuda}/mlp_bf16 (cuBLASLt epilogues on the GPU, their exact emulation on the CPU); the others
// are the bf16 GEMMs of linalg_bf16.cpp (kernels/{cpu,cuda}/bf16: gemm_bf16, float32 output, then rounded).
#include "runtime/ops/mlp_bf16.h"

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/mlp_bf16.h"
#include "kernels/cpu/reduce.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "runtime/ops/device_kernel.h"
#include "runtime/ops/mixed_precision.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/mlp_bf16.h"
#include "kernels/cuda/reduce.h"
#include "runtime/ops/cuda_workspace.h"
#endif

namespace ddp::ops {
namespace {

const BFloat16* bf(const Tensor& t) { return t.data<BFloat16>(); }
BFloat16* bf_mut(Tensor& t) { return t.data<BFloat16>(); }
const BFloat16* bf_or_null(const Tensor& t) { return t.defined() ? t.data<BFloat16>() : nullptr; }

// The GELU GEMMs of kernels/{cpu,cuda}/mlp_bf16 on `dev`; CUDA gets the caching allocator's scratch.
void gelu_linear_on(Device dev, int64_t rows, int64_t out, int64_t in, const BFloat16* x, const BFloat16* w,
                    const BFloat16* bias, BFloat16* hidden, BFloat16* pre) {
#ifdef DDP_WITH_CUDA
  if (dev.is_cuda()) {
    CudaWorkspace ws{dev, {}};
    return kernels::cuda::gelu_linear_bf16(rows, out, in, x, w, bias, hidden, pre, ws.fn());
  }
#endif
  check_device_built("mlp_bf16", dev);
  kernels::cpu::gelu_linear_bf16(rows, out, in, x, w, bias, hidden, pre);
}
void dgelu_matmul_on(Device dev, int64_t rows, int64_t hidden, int64_t n, const BFloat16* g,
                     const BFloat16* w, const BFloat16* pre, BFloat16* d_pre, BFloat16* d_bias) {
#ifdef DDP_WITH_CUDA
  if (dev.is_cuda()) {
    CudaWorkspace ws{dev, {}};
    return kernels::cuda::dgelu_matmul_bf16(rows, hidden, n, g, w, pre, d_pre, d_bias, ws.fn());
  }
#endif
  check_device_built("mlp_bf16", dev);
  kernels::cpu::dgelu_matmul_bf16(rows, hidden, n, g, w, pre, d_pre, d_bias);
}

// c (M, N) float32 = op(A) op(B), A and B bf16 (K > 0), then rounded to bf16 values.
Tensor rounded_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& A, const Tensor& B,
                    Tensor c) {
  const Device dev = A.device();
  DDP_KERNEL(dev, gemm_bf16, ta, tb, 1, M, N, K, 1.f, bf(A), 0, bf(B), 0, 0.f, c.data<float>(), 0);
  DDP_KERNEL(dev, round_to_bf16, c.data<float>(), c.numel());
  return c;
}

struct MlpBf16Backward final : autograd::Node {
  Tensor xb, fc_wb, proj_wb, hidden, pre;  // bf16; hidden and pre (rows, hidden_f)
  Shape x_shape;
  bool x_bf16 = false;  // x was a bf16 tensor: dx is one (the GEMM rounds on its way out)
  int64_t rows = 0, in = 0, hidden_f = 0, out = 0;

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {};
    auto wants = [&](size_t i) { return i < next_edges.size() && next_edges[i].valid(); };
    const Device dev = grads[0].device();
    const Tensor g = to_bf16(grads[0]);  // (rows, out)
    std::vector<Tensor> out_grads(5);
    if (rows == 0) {  // empty sums: zero weight and bias gradients, an empty dx
      if (wants(0)) out_grads[0] = Tensor::zeros(x_shape, x_bf16 ? DType::BF16 : DType::F32, dev);
      const Shape shapes[5] = {x_shape, {hidden_f, in}, {hidden_f}, {out, hidden_f}, {out}};
      for (size_t i = 1; i < 5; ++i)
        if (wants(i)) out_grads[i] = Tensor::zeros(shapes[i], DType::F32, dev);
      return out_grads;
    }
    // the parameters' gradients straight into their DDP bucket slots where the reducer offers them
    auto destination = [&](size_t i, const Shape& shape) {
      return autograd::gradient_destination_or_empty(next_edges[i], shape, DType::F32, dev);
    };
    if (wants(3))  // dproj_W (out, hidden) = g^T hidden
      out_grads[3] =
          rounded_gemm(true, false, out, hidden_f, rows, g, hidden, destination(3, {out, hidden_f}));
    if (wants(4)) {  // dproj_b = column sums of the rounded g
      out_grads[4] = destination(4, {out});
      detail::bias_gradient_bf16(g, rows, out, out_grads[4].data<float>());
    }
    if (wants(0) || wants(1) || wants(2)) {
      Tensor d_pre = Tensor::empty({rows, hidden_f}, DType::BF16, dev);
      Tensor dfc_b = wants(2) ? Tensor::empty({hidden_f}, DType::BF16, dev) : Tensor();  // rounded sums
      dgelu_matmul_on(dev, rows, hidden_f, out, bf(g), bf(proj_wb), bf(pre), bf_mut(d_pre),
                      wants(2) ? bf_mut(dfc_b) : nullptr);
      if (wants(2)) {
        out_grads[2] = destination(2, {hidden_f});
        out_grads[2].copy_from(dfc_b);  // exact: bf16 values into float32
      }
      if (wants(1))  // dfc_W (hidden, in) = d_pre^T xb
        out_grads[1] =
            rounded_gemm(true, false, hidden_f, in, rows, d_pre, xb, destination(1, {hidden_f, in}));
      if (wants(0) && x_bf16) {  // dx (rows, in) = d_pre fc_W
        out_grads[0] = Tensor::empty(x_shape, DType::BF16, dev);
        DDP_KERNEL(dev, gemm_bf16_to_bf16, false, false, rows, in, hidden_f, bf(d_pre), bf(fc_wb),
                   bf_mut(out_grads[0]));
      } else if (wants(0)) {
        out_grads[0] = rounded_gemm(false, false, rows, in, hidden_f, d_pre, fc_wb,
                                    Tensor::empty(x_shape, DType::F32, dev));
      }
    }
    return out_grads;
  }
  const char* name() const override { return "mlp_bf16"; }
  void release_saved() override { xb = fc_wb = proj_wb = hidden = pre = Tensor(); }
};

void check_f32(const char* name, const Tensor& t, const Tensor& x) {
  DDP_CHECK(t.dtype() == DType::F32, "mlp_bf16: ", name, " is ", dtype_name(t.dtype()),
            "; the bf16 MLP takes float32 tensors (master weights), convert with .to(DType::F32)");
  DDP_CHECK(t.device() == x.device(), "mlp_bf16: ", name, " is on ", t.device().str(), " but x is on ",
            x.device().str(), "; move one with .to(device)");
}
}  // namespace

bool mlp_bf16_supports(const Device& device) {
#ifdef DDP_WITH_CUDA
  return device.is_cpu() || device.is_cuda();
#else
  return device.is_cpu();
#endif
}

Tensor mlp_bf16(const Tensor& x, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
                const Tensor& proj_bias) {
  DDP_CHECK(x.defined() && fc_weight.defined() && proj_weight.defined(),
            "mlp_bf16: x, fc_weight and proj_weight must be defined (only the biases may be absent)");
  // x float32, or bfloat16 (a layer norm's bf16 output: ops::layer_norm_bf16_output; dx is then bf16 too)
  if (x.dtype() != DType::BF16) check_f32("x", x, x);
  check_f32("fc_weight", fc_weight, x);
  check_f32("proj_weight", proj_weight, x);
  DDP_CHECK(mlp_bf16_supports(x.device()), "mlp_bf16 on ", x.device().str(),
            " needs a CUDA build (DDP_CUDA=ON) or a CPU tensor");
  DDP_CHECK(fc_weight.dim() == 2 && proj_weight.dim() == 2, "mlp_bf16: fc_weight ",
            shape_str(fc_weight.shape()), " and proj_weight ", shape_str(proj_weight.shape()),
            " must be (out_features, in_features) matrices");
  const int64_t hidden_f = fc_weight.size(0), in = fc_weight.size(1), out = proj_weight.size(0);
  DDP_CHECK(in > 0 && hidden_f > 0 && out > 0, "mlp_bf16: fc_weight ", shape_str(fc_weight.shape()),
            " and proj_weight ", shape_str(proj_weight.shape()),
            " have a zero-size feature dimension; use ops::linear and ops::gelu for empty layers");
  DDP_CHECK(x.dim() >= 1 && x.size(-1) == in, "mlp_bf16: x has shape ", shape_str(x.shape()),
            " but fc_weight ", shape_str(fc_weight.shape()), " expects a last dimension of ", in);
  DDP_CHECK(proj_weight.size(1) == hidden_f, "mlp_bf16: proj_weight ", shape_str(proj_weight.shape()),
            " must take fc's ", hidden_f, " features: expected (", out, ", ", hidden_f, ")");
  if (fc_bias.defined()) {
    check_f32("fc_bias", fc_bias, x);
    DDP_CHECK(fc_bias.dim() == 1 && fc_bias.size(0) == hidden_f, "mlp_bf16: fc_bias has shape ",
              shape_str(fc_bias.shape()), "; expected (", hidden_f, ",) to match fc_weight");
  }
  if (proj_bias.defined()) {
    check_f32("proj_bias", proj_bias, x);
    DDP_CHECK(proj_bias.dim() == 1 && proj_bias.size(0) == out, "mlp_bf16: proj_bias has shape ",
              shape_str(proj_bias.shape()), "; expected (", out, ",) to match proj_weight");
  }
  const int64_t rows = x.numel() / in;
  const Device dev = x.device();
  Shape y_shape = x.shape();
  y_shape.back() = out;

  // The weights' bf16 copies (fc's bias included: cuBLASLt's bias is bf16): once per optimizer step inside
  // the training step's Bf16WeightCast scope (bf16_weight_cast.h), else converted on every call.
  const Tensor xb = to_bf16(x), fc_wb = bf16_weight(fc_weight), proj_wb = bf16_weight(proj_weight);
  const Tensor fc_bb = fc_bias.defined() ? bf16_weight(fc_bias) : Tensor();
  Tensor hidden = Tensor::empty({rows, hidden_f}, DType::BF16, dev);
  Tensor pre = Tensor::empty({rows, hidden_f}, DType::BF16, dev);
  gelu_linear_on(dev, rows, hidden_f, in, bf(xb), bf(fc_wb), bf_or_null(fc_bb), bf_mut(hidden), bf_mut(pre));
  // y = bf16(hidden proj_W^T + proj_b): the bias added to the float32 sum, as linear_bf16 does
  Tensor y = Tensor::empty(y_shape, DType::F32, dev);
  if (rows > 0) {
    detail::linear_gemm_bf16(hidden, proj_wb, proj_bias, rows, out, hidden_f, y.data<float>());
    DDP_KERNEL(dev, round_to_bf16, y.data<float>(), y.numel());
  }
  if (autograd::needs_grad({&x, &fc_weight, &fc_bias, &proj_weight, &proj_bias})) {
    auto node = std::make_shared<MlpBf16Backward>();
    node->x_shape = x.shape();
    node->x_bf16 = x.dtype() == DType::BF16;
    node->rows = rows;
    node->in = in;
    node->hidden_f = hidden_f;
    node->out = out;
    node->proj_wb = proj_wb;  // every gradient but dproj_W, dproj_b needs d_pre, and so proj_W and pre
    node->pre = pre;
    if (proj_weight.requires_grad()) node->hidden = hidden;
    if (fc_weight.requires_grad()) node->xb = xb;
    if (x.requires_grad()) node->fc_wb = fc_wb;
    autograd::record(node, {&x, &fc_weight, &fc_bias, &proj_weight, &proj_bias}, {&y});
  }
  return y;
}

}  // namespace ddp::ops
