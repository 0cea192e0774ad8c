// mixed_precision.h - bf16 mixed precision: float32 master weights, optimizer and gradients; bfloat16 compute
// in matmul, linear, attention and the GPT's fused MLP. Turned on per thread with a Bf16Compute guard (train
// --dtype bfloat16, bench_e2e --dtype bf16); tensors stay float32 between ops (the fused MLP keeps its hidden
// activation in bf16 inside its autograd node), except where an op is asked for a bfloat16 output whose
// consumers round anyway: ops::linear_bf16_output, ops::layer_norm_bf16_output (the GPT asks for them:
// models::GPT::set_bf16_activations - its layer norms' outputs, qkv, the attention's output and the logits
// are bf16 tensors, with the values the float32 tensors would hold). linear, the fused MLP and the attention
// take a bf16 input as it is (and hand back a bf16 gradient for it); cross_entropy takes bf16 logits (float32
// loss, bf16 gradient); layer_norm's backward takes a bf16 gradient. A bf16 tensor used twice gets the sum of
// its two bf16 gradients, added in float32 and rounded again (autograd/engine.cpp).
//
// Where rounding to bfloat16 (round to nearest even) happens, on both devices:
//   linear / matmul: both operands are rounded (held as bf16 tensors, also for the backward); the GEMM
//     multiplies them with float32 accumulation (GPU: cuBLAS bf16 tensor cores, CUBLAS_COMPUTE_32F; CPU: the
//     exact float32 values of the bf16 operands through the float32 GEMM); the product is rounded. A bias is
//     added in float32 before that rounding (inside the GEMM, beta = 1). Backward: the incoming gradient is
//     rounded; dx and dW come from bf16 GEMMs and are rounded; db = float32 column sums of the rounded
//     gradient, rounded.
//   causal_self_attention on CUDA with cuDNN's fused attention (bf16_attention_kernel says which): q, k, v, y
//     and their gradients are bf16 tensors; inside, cuDNN's flash tiles with float32 softmax and statistics
//     (its own rounding of the probabilities before P V: within bf16 tolerance of the emulation below).
//   causal_self_attention otherwise: its input qkv and output y are rounded (gradients: dy and dqkv); every
//   GEMM inside
//     has bf16 operands and float32 accumulation and output (GPU: cuBLAS bf16 tensor cores): the softmax
//     probabilities are rounded before att v and att^T dy, the softmax gradient before the dq / dk GEMMs;
//     scores, softmax, its backward and the saved probabilities stay float32.
//   the GPT's MLP, proj(gelu(fc(x))) (models/gpt.cpp MLPBlock; runtime/ops/mlp_bf16.h, one op): x and both
//     weights are rounded, and so is fc's bias (cuBLASLt's GELU epilogue takes its bias in D's type, bf16;
//     proj's bias stays float32); the fc GEMM's float32 accumulator plus that bias is the pre-activation z,
//     and gelu(z) (GPT-2's tanh form, in float32) is rounded ONCE to give the bf16 hidden activation - z
//     itself is not rounded before the GELU, unlike a linear followed by gelu; z is kept as bf16 only for the
//     backward. proj is a linear as above (hidden is already bf16). Backward: the incoming gradient is
//     rounded; dproj_W, dproj_b as in linear; d_pre = (g proj_W) * gelu'(bf16 z) from the float32
//     accumulator, rounded once (dL/dhidden is not rounded on its own); dfc_b = float32 column sums of the
//     rounded d_pre (GPU, fused: cuBLASLt's sums), rounded; dfc_W, dx from bf16 GEMMs with d_pre, rounded.
//     GPU: cuBLASLt epilogues (GELU_AUX_BIAS, DGELU_BGRAD) do the per-element work inside the GEMMs, where
//     shapes are aligned (kernels/cuda/mlp_bf16_plan.h); elsewhere, and on the CPU, the same math runs after
//     the GEMM (kernels/cpu/mlp_bf16_epilogue.h). The hidden activation is never float32 in memory.
//   layer_norm_bf16_output: y (computed in float32) rounded once; backward in float32 from the (bf16)
//   gradient. cross_entropy on bf16 logits: float32 arithmetic on their exact values; the gradient rounded
//   once.
// Everything else (layer_norm, a gelu outside the GPT's MLP, softmax cross-entropy on float32 logits,
// embedding, optimizer, gradient buckets) is float32. The gradient all-reduce is float32 unless
// DDPOptions::comm_hook = BF16CompressHook (bench_e2e --allreduce-dtype). On the CPU the same rounding points
// make it an exact emulation up to GEMM summation order, so the logic is tested without a GPU
// (tests/ops_nn/test_mixed_precision.cpp, test_mlp_bf16.cpp).
// Weights are rounded through ops::bf16_weight (bf16_weight_cast.h): once per optimizer step inside the
// training step's Bf16WeightCast scope, else on every use.
#pragma once
#include <string>

#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// True while a Bf16Compute guard with on = true is active on this thread.
bool bf16_compute_enabled();

class Bf16Compute {
 public:
  explicit Bf16Compute(bool on = true);
  ~Bf16Compute();
  Bf16Compute(const Bf16Compute&) = delete;
  Bf16Compute& operator=(const Bf16Compute&) = delete;

 private:
  bool prev_;
};

// Whether an op on this float tensor computes in bf16 now (mode on and the tensor is float32; float64 ops
// are never lowered).
inline bool use_bf16_compute(const Tensor& t) { return bf16_compute_enabled() && t.dtype() == DType::F32; }
// Whether a bf16-aware op (linear, the attention, the GPT's fused MLP) runs its bf16 path on this input: bf16
// compute on a float32 tensor, or a bfloat16 tensor (another op's bf16 output), which it takes as it is.
inline bool takes_bf16_path(const Tensor& t) { return use_bf16_compute(t) || t.dtype() == DType::BF16; }

// float32 -> bfloat16 tensor on the same device (rounded); no autograd. A bfloat16 x is returned as it is.
Tensor to_bf16(const Tensor& x);
// float32 -> float32 holding the bf16-rounded values; no autograd.
Tensor round_to_bf16(const Tensor& x);
// Differentiable rounding: forward rounds x, backward rounds the gradient (a cast to bf16 and back).
Tensor bf16_round(const Tensor& x);
// Differentiable widening: a bfloat16 x as float32 (exact); backward rounds the float32 gradient to bfloat16
// once. (cross_entropy on the CPU takes bf16 logits this way.)
Tensor widen_bf16(const Tensor& x);
// Differentiable narrowing: a float32 x rounded into a bfloat16 tensor; backward widens the bf16 gradient.
Tensor narrow_bf16(const Tensor& x);

// Which kernels the bf16 attention runs on this tensor: "cudnn" (cuDNN's fused attention: CUDA, a build with
// the cuDNN frontend, a shape it takes - kernels/cuda/sdpa_layout.h and cuDNN's own graph check - and
// DDP_CUDNN_ATTENTION not 0),
// "materialising (cuBLAS)" or "materialising (CPU emulation)". Benchmarks print it.
const char* bf16_attention_kernel(const Tensor& qkv, int64_t n_head);
// The same for a (B, T, 3C) qkv on `device` (benchmarks ask before any tensor exists).
const char* bf16_attention_kernel(Device device, int64_t B, int64_t T, int64_t C, int64_t n_head);
// Why that is not cuDNN's fused attention ("" when it is): not CUDA, the switch, the build, the shape, or
// cuDNN's own refusal of the graph (kernels/cuda/cudnn_attention.h: tried once per device and shape).
std::string bf16_attention_not_cudnn(Device device, int64_t B, int64_t T, int64_t C, int64_t n_head);

namespace detail {
// The bf16 paths of ops::matmul / ops::linear / ops::causal_self_attention, called by them after their
// argument checks when use_bf16_compute(input).
Tensor matmul_bf16(const Tensor& a, const Tensor& b, int64_t batch, int64_t M, int64_t K, int64_t N,
                   bool shared_b);
// bf16_output: the rounded product as a bfloat16 tensor (ops::linear_bf16_output) instead of float32.
Tensor linear_bf16(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t rows, bool bf16_output);
// qkv float32 under bf16 compute gives a float32 y, a bfloat16 qkv a bfloat16 y (the GPT's attention between
// its qkv and proj GEMMs: no float32 copy of either); the same values either way.
Tensor attention_bf16(const Tensor& qkv, int64_t n_head);
// y (rows, out) float32 = xb (rows, in) wb^T (+ bias, float32 (out,), may be undefined), xb and wb bf16, in >
// 0, not yet rounded: on CUDA with a bias one cuBLASLt matmul with the bias in its epilogue
// (kernels/cuda/linear_bf16.h), else (and where cuBLASLt has no algorithm) the bias broadcast into y and a
// GEMM with beta = 1. The same float32 sum either way. linear_bf16 and the fused MLP's projection use it.
void linear_gemm_bf16(const Tensor& xb, const Tensor& wb, const Tensor& bias, int64_t rows, int64_t out,
                      int64_t in, float* y);
// out (n) float32 = the column sums of gb (rows, n), a bfloat16 gradient, rounded to bf16: a bias gradient of
// the bf16 paths. On CUDA summed straight from the 2-byte elements (widened exactly: the same float32 sums as
// over a float32 copy, kernels/cuda/column_sum_plan.h), on the CPU over a float32 copy.
void bias_gradient_bf16(const Tensor& gb, int64_t rows, int64_t n, float* out);
}  // namespace detail

}  // namespace ddp::ops
