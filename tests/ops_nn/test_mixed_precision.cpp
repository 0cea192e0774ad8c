// test_mixed_precision.cpp - bf16 mixed precision (runtime/ops/mixed_precision.h) on the CPU, where bf16 is
// emulated: the rounding happens exactly at the documented points. Each bf16 result is compared bitwise with
// a reference built by hand from explicitly rounded operands, one float32 GEMM with the same transpose flags,
// and a rounded product; results must be bf16 values, and must differ from the float32 op (the mode took
// effect). On a GPU the same ops run on cuBLAS bf16 tensor cores and are compared with the CPU within a
// tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "kernels/cpu/gemm.h"
#include "models/gpt.h"
#include "ops_nn_test_util.h"
#include "runtime/autograd/engine.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/mixed_precision.h"

using namespace ddp;

namespace {
Tensor leaf(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::randn(s, seed);
  t.set_requires_grad(true);
  return t;
}
Tensor round16(const Tensor& t) { return ops::round_to_bf16(t.detach()); }

// The reference of one bf16 GEMM: rounded operands (float32 values), one float32 GEMM, rounded product.
Tensor ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& A, const Tensor& B,
                const Shape& out_shape) {
  Tensor a = round16(A), b = round16(B);
  Tensor c = Tensor::zeros(out_shape);
  kernels::cpu::gemm<float>(ta, tb, M, N, K, 1.f, a.data<float>(), b.data<float>(), 0.f, c.data<float>());
  return ops::round_to_bf16(c);
}

::testing::AssertionResult bf16_values(const Tensor& t) {
  auto v = t.to_double_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    if (BFloat16::from_float(f).to_float() != f)
      return ::testing::AssertionFailure() << "element " << i << " = " << f << " is not a bfloat16 value";
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult bitwise(const Tensor& a, const Tensor& b) {
  if (a.to_double_vector() == b.to_double_vector()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "tensors differ";
}
}  // namespace

TEST(MixedPrecision, GuardIsScopedAndPerThread) {
  EXPECT_FALSE(ops::bf16_compute_enabled());
  {
    ops::Bf16Compute on;
    EXPECT_TRUE(ops::bf16_compute_enabled());
    {
      ops::Bf16Compute off(false);
      EXPECT_FALSE(ops::bf16_compute_enabled());
    }
    EXPECT_TRUE(ops::bf16_compute_enabled());
    bool other_thread = true;
    std::thread([&] { other_thread = ops::bf16_compute_enabled(); }).join();
    EXPECT_FALSE(other_thread);
  }
  EXPECT_FALSE(ops::bf16_compute_enabled());
}

TEST(MixedPrecision, LinearRoundsOperandsProductAndGradientsWhereDocumented) {
  const int64_t rows = 12, in = 9, out = 5;
  Tensor x = leaf({6, 2, in}, 1), w = leaf({out, in}, 2), b = leaf({out}, 3);
  Tensor g = Tensor::randn({6, 2, out}, 4);
  Tensor y;
  {
    ops::Bf16Compute on;
    y = ops::linear(x, w, b);
    autograd::backward({y}, {g});
  }
  autograd::NoGradGuard ng;
  // forward: bias in float32 inside the GEMM (beta = 1), then the product rounded
  Tensor yr = Tensor::empty({rows, out});
  kernels::cpu::fill_rows(b.data<float>(), rows, out, yr.data<float>());
  Tensor xr = round16(x), wr = round16(w);
  kernels::cpu::gemm<float>(false, true, rows, out, in, 1.f, xr.data<float>(), wr.data<float>(), 1.f,
                            yr.data<float>());
  EXPECT_TRUE(bitwise(y, ops::round_to_bf16(yr)));
  EXPECT_TRUE(bf16_values(y));
  EXPECT_FALSE(bitwise(y, ops::linear(x, w, b))) << "no rounding happened";
  EXPECT_EQ(y.dtype(), DType::F32);
  // backward: gradient rounded; dx, dW from bf16 GEMMs, rounded; db = rounded column sums of the rounded g
  EXPECT_TRUE(bitwise(x.grad(), ref_gemm(false, false, rows, in, out, g, w, x.shape())));
  EXPECT_TRUE(bitwise(w.grad(), ref_gemm(true, false, out, in, rows, g, x, w.shape())));
  Tensor gr = round16(g);
  Tensor db = Tensor::zeros({out});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < out; ++c) db.data<float>()[c] += gr.data<float>()[r * out + c];
  EXPECT_TRUE(bitwise(b.grad(), ops::round_to_bf16(db)));
  EXPECT_EQ(w.grad().dtype(), DType::F32) << "master weights and their gradients stay float32";
  EXPECT_TRUE(bf16_values(w.grad()));
}

// ops::linear_bf16_output (the GPT's classifier): under bf16 compute a bfloat16 tensor holding exactly
// ops::linear's rounded float32 product, and - given the same incoming gradient, as bf16 or as its float32
// values - bitwise ops::linear's gradients of x, weight and bias; with and without a bias (the bias takes the
// float32 product and one rounding pass; without, the GEMM rounds on its way out), an empty batch, and
// outside bf16 compute ops::linear itself (float32 out).
TEST(MixedPrecision, LinearBf16OutputHoldsTheRoundedProductWithTheSameGradients) {
  for (bool with_bias : {false, true})
    for (int64_t rows : {0, 1, 12}) {
      SCOPED_TRACE(std::string(with_bias ? "bias" : "no bias") + " rows " + std::to_string(rows));
      const int64_t in = 9, out = 5;
      Tensor g16 = Tensor::randn({rows, out}, 4).to(DType::BF16);
      Tensor g32 = g16.to(DType::F32);
      auto run = [&](bool bf16_out, Tensor& y, std::vector<Tensor>& grads) {
        Tensor x = leaf({rows, in}, 1), w = leaf({out, in}, 2), b = with_bias ? leaf({out}, 3) : Tensor();
        ops::Bf16Compute on;
        y = bf16_out ? ops::linear_bf16_output(x, w, b) : ops::linear(x, w, b);
        autograd::backward({y}, {bf16_out ? g16 : g32});
        grads = {x.grad(), w.grad()};
        if (with_bias) grads.push_back(b.grad());
      };
      Tensor y16, y32;
      std::vector<Tensor> gr16, gr32;
      run(true, y16, gr16);
      run(false, y32, gr32);
      EXPECT_EQ(y16.dtype(), DType::BF16);
      EXPECT_EQ(y16.shape(), y32.shape());
      EXPECT_TRUE(bitwise(y16, y32));
      ASSERT_EQ(gr16.size(), gr32.size());
      for (size_t i = 0; i < gr16.size(); ++i) {
        ASSERT_TRUE(gr16[i].defined()) << "gradient " << i;
        EXPECT_EQ(gr16[i].dtype(), DType::F32) << "gradient " << i;
        EXPECT_TRUE(bitwise(gr16[i], gr32[i])) << "gradient " << i;
      }
    }
  Tensor x = leaf({3, 4}, 5), w = leaf({2, 4}, 6);
  Tensor y = ops::linear_bf16_output(x, w);  // no bf16 compute: ops::linear
  EXPECT_EQ(y.dtype(), DType::F32);
  EXPECT_TRUE(bitwise(y, ops::linear(x, w)));
}

// The GPT's attention block under bf16 compute keeps qkv and the attention's output as bfloat16 tensors
// between its two GEMMs (models/gpt.cpp, qkv's bf16_output): its output and every gradient are bitwise those
// of the same ops with float32 tensors holding the bf16 values in between (ops::linear,
// causal_self_attention, ops::linear) - on the CPU emulation here, and on a GPU (cuDNN's attention) against
// that emulation within bf16 tolerance.
TEST(MixedPrecision, GptAttentionKeepsBf16BetweenItsGemmsWithTheFloat32PathsValues) {
  models::GPTConfig c;
  c.d_model = 32;
  c.n_head = 4;
  for (Device dev : {Device::cpu(), Device::cuda(0)}) {
    if (dev.is_cuda() && cuda_device_count() == 0) continue;
    SCOPED_TRACE(dev.str());
    models::CausalSelfAttention attn(c);
    attn.qkv->bf16_output = true;  // as models::GPT sets it (set_bf16_activations)
    attn.to(dev);
    const Tensor g = Tensor::randn({2, 8, 32}, 61).to(dev);
    auto grads_of = [&](bool module_path, Tensor& y) {
      Tensor x = Tensor::randn({2, 8, 32}, 60).to(dev);
      x.set_requires_grad(true);
      attn.zero_grad();
      {
        ops::Bf16Compute on;
        if (module_path) {
          EXPECT_EQ((*attn.qkv)(x).dtype(), DType::BF16);
          y = attn.forward(x);
        } else {
          y = ops::linear(
              ops::causal_self_attention(ops::linear(x, attn.qkv->weight, attn.qkv->bias), c.n_head),
              attn.proj->weight, attn.proj->bias);
        }
        autograd::backward({y}, {g});
      }
      std::vector<Tensor> out{x.grad().clone()};
      for (const Tensor& p : attn.parameters()) out.push_back(p.grad().clone());
      return out;
    };
    Tensor y_bf16, y_f32;
    const std::vector<Tensor> a = grads_of(true, y_bf16), b = grads_of(false, y_f32);
    EXPECT_EQ(y_bf16.dtype(), DType::F32);
    EXPECT_TRUE(bitwise(y_bf16, y_f32));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].dtype(), DType::F32) << "gradient " << i;
      EXPECT_TRUE(bitwise(a[i], b[i])) << "gradient " << i;
    }
  }
}

// The whole GPT under bf16 compute, tied and untied head, padded vocabulary, gradient accumulation over two
// backwards: with its activations bf16 between ops (the default: the layer norms' outputs, qkv, the
// attention's output and the logits bf16 tensors) the logits, the float32 loss and every parameter gradient
// are bitwise those of the same model with every activation float32 (set_bf16_activations(false)) - on the
// CPU emulation; on a GPU within bf16 tolerance (cuBLAS rounds its own accumulators).
TEST(MixedPrecision, GptBf16ActivationsGiveTheFloat32ActivationsLossAndGradients) {
  for (Device dev : {Device::cpu(), Device::cuda(0)})
    for (bool tied : {false, true}) {
      if (dev.is_cuda() && cuda_device_count() == 0) continue;
      SCOPED_TRACE(dev.str() + (tied ? " tied" : " untied"));
      models::GPTConfig c;
      c.vocab = 50;
      c.vocab_padded = 64;
      c.context = 16;
      c.d_model = 32;
      c.n_head = 4;
      c.tie_head = tied;
      models::GPT gpt(c);
      gpt.to(dev);
      std::vector<int64_t> tokens(2 * 16);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 7 + 3) % 50);
      const Tensor idx = Tensor::from_data(tokens, {2, 16}).to(dev);
      ops::CrossEntropyOptions opt;
      opt.classes = gpt.loss_classes();
      struct Run {
        DType logits_dtype;
        std::vector<double> logits, losses;
        std::vector<std::vector<double>> grads;
      };
      auto run = [&](bool bf16_activations) {
        gpt.set_bf16_activations(bf16_activations);
        gpt.zero_grad();
        Run r;
        ops::Bf16Compute on;
        for (int micro = 0; micro < 2; ++micro) {
          Tensor logits = gpt.forward(idx);
          r.logits_dtype = logits.dtype();
          r.logits = logits.to_double_vector();
          Tensor loss = ops::cross_entropy(logits, idx, opt);
          EXPECT_EQ(loss.dtype(), DType::F32);
          r.losses.push_back(loss.to_double_vector()[0]);
          autograd::backward(ops::mul_scalar(loss, 0.5));
        }
        for (const auto& [name, p] : gpt.named_parameters()) {
          EXPECT_TRUE(p.grad().defined() && p.grad().dtype() == DType::F32) << name;
          r.grads.push_back(p.grad().to_double_vector());
        }
        return r;
      };
      const Run a = run(true), b = run(false);
      EXPECT_EQ(a.logits_dtype, DType::BF16);
      EXPECT_EQ(b.logits_dtype, DType::F32);
      ASSERT_EQ(a.grads.size(), b.grads.size());
      if (dev.is_cpu()) {
        EXPECT_EQ(a.logits, b.logits);
        EXPECT_EQ(a.losses, b.losses);
        for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << "parameter " << i;
      } else {
        for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(a.losses[i], b.losses[i], 1e-2);
        for (size_t i = 0; i < a.grads.size(); ++i) {
          double scale = 0, diff = 0;
          for (size_t k = 0; k < a.grads[i].size(); ++k) {
            scale = std::max(scale, std::abs(b.grads[i][k]));
            diff = std::max(diff, std::abs(a.grads[i][k] - b.grads[i][k]));
          }
          EXPECT_LE(diff, 5e-2 * scale + 1e-6) << "parameter " << i;
        }
      }
    }
}

// A bf16 tensor used twice (the logits of two losses): the engine adds its two bf16 gradients in float32 and
// rounds the sum once more - within a bf16 ulp of the float32 activations' gradient, which rounds only the
// sum.
TEST(MixedPrecision, Bf16TensorUsedTwiceSumsItsGradientsAndStaysBf16) {
  Tensor x = leaf({6, 9}, 70), w = leaf({16, 9}, 71);
  const Tensor t = Tensor::from_data(std::vector<int64_t>{1, 5, 9, 13, 2, 0}, {6});
  ops::Bf16Compute on;
  Tensor logits = ops::linear_bf16_output(x, w);
  ASSERT_EQ(logits.dtype(), DType::BF16);
  ops::CrossEntropyOptions sum;
  sum.reduction = ops::LossReduction::Sum;
  autograd::backward(ops::cross_entropy(logits, t) + ops::cross_entropy(logits, t, sum));
  const std::vector<double> g16 = w.grad().to_double_vector();
  Tensor w2 = leaf({16, 9}, 71);
  Tensor logits32 = ops::linear(x, w2);
  autograd::backward(ops::cross_entropy(logits32, t) + ops::cross_entropy(logits32, t, sum));
  const std::vector<double> g32 = w2.grad().to_double_vector();
  ASSERT_EQ(g16.size(), g32.size());
  double scale = 0;
  for (double v : g32) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g16.size(); ++i) EXPECT_NEAR(g16[i], g32[i], 2e-2 * scale) << i;
}

TEST(MixedPrecision, BatchedAndSharedMatmulRoundWhereDocumented) {
  const int64_t B = 3, M = 4, K = 5, N = 6;
  for (bool shared : {false, true}) {
    Tensor a = leaf({B, M, K}, 10), b = shared ? leaf({K, N}, 11) : leaf({B, K, N}, 11);
    Tensor g = Tensor::randn({B, M, N}, 12);
    Tensor y;
    {
      ops::Bf16Compute on;
      y = ops::matmul(a, b);
      autograd::backward({y}, {g});
    }
    autograd::NoGradGuard ng;
    if (shared) {
      EXPECT_TRUE(bitwise(y, ref_gemm(false, false, B * M, N, K, a, b, y.shape())));
      EXPECT_TRUE(bitwise(a.grad(), ref_gemm(false, true, B * M, K, N, g, b, a.shape())));
      EXPECT_TRUE(bitwise(b.grad(), ref_gemm(true, false, K, N, B * M, a, g, b.shape())));
    } else {
      for (int64_t i = 0; i < B; ++i) {
        auto at = [i](const Tensor& t) { return t.detach().slice0(i, i + 1).clone(); };
        Tensor ai = at(a), bi = at(b), gi = at(g);
        EXPECT_TRUE(bitwise(at(y), ref_gemm(false, false, M, N, K, ai, bi, {1, M, N}))) << "batch " << i;
        EXPECT_TRUE(bitwise(at(a.grad()), ref_gemm(false, true, M, K, N, gi, bi, {1, M, K})))
            << "batch " << i;
        EXPECT_TRUE(bitwise(at(b.grad()), ref_gemm(true, false, K, N, M, ai, gi, {1, K, N})))
            << "batch " << i;
      }
    }
    EXPECT_FALSE(bitwise(y, ops::matmul(a, b))) << "no rounding happened";
  }
}

TEST(MixedPrecision, AttentionRoundsProbabilitiesBeforeTheValueProduct) {
  // One head, head size 1, two tokens: y1 = bf16(bf16(p0) v0 + bf16(p1) v1) with p the float32 softmax of the
  // scores q1 k0, q1 k1 (products of bf16 values are exact in float32, and a two-term sum rounds once, so
  // this hand computation is bitwise what the kernel must give).
  const float q1 = 1.25f, k0 = 0.5f, k1 = -0.375f, v0 = 3.0f, v1 = -1.5f;
  Tensor qkv = Tensor::from_data<float>({0.f, k0, v0, q1, k1, v1}, {1, 2, 3});
  Tensor y;
  {
    ops::Bf16Compute on;
    y = ops::causal_self_attention(qkv, 1);
  }
  const float s0 = q1 * k0, s1 = q1 * k1, m = s0 > s1 ? s0 : s1;
  float e0 = std::exp(s0 - m), e1 = std::exp(s1 - m);
  const float inv = 1.f / (e0 + e1);
  const float p0 = e0 * inv, p1 = e1 * inv;
  auto r = [](float x) { return BFloat16::from_float(x).to_float(); };
  ASSERT_NE(r(p0), p0) << "choose inputs whose probabilities are not bf16 values";
  auto out = y.to_double_vector();
  EXPECT_EQ(out[0], static_cast<double>(r(v0)));
  EXPECT_EQ(out[1], static_cast<double>(r(r(p0) * v0 + r(p1) * v1)));
  EXPECT_NE(out[1], static_cast<double>(r(p0 * v0 + p1 * v1))) << "the probabilities were not rounded";
}

TEST(MixedPrecision, AttentionGradientsTrackTheFloat32OpAndAreBf16) {
  const int64_t n_head = 2;
  Tensor qkv = leaf({2, 5, 12}, 20);
  Tensor g = Tensor::randn({2, 5, 4}, 21);
  Tensor y;
  {
    ops::Bf16Compute on;
    y = ops::causal_self_attention(qkv, n_head);
    autograd::backward({y}, {g});
  }
  Tensor q32 = qkv.detach().clone();
  q32.set_requires_grad(true);
  Tensor y32 = ops::causal_self_attention(q32, n_head);
  autograd::backward({y32}, {g});
  EXPECT_TRUE(bf16_values(y));
  EXPECT_TRUE(bf16_values(qkv.grad()));
  EXPECT_TRUE(ddp::testing::all_close(y, y32.detach(), 3e-2, 3e-2));
  EXPECT_TRUE(ddp::testing::all_close(qkv.grad(), q32.grad(), 3e-2, 3e-2));
  EXPECT_FALSE(bitwise(qkv.grad(), q32.grad())) << "no rounding happened in the backward";
}

TEST(MixedPrecision, Float64OpsAreNeverLowered) {
  Tensor x = Tensor::randn({4, 3}, 30).to(DType::F64), w = Tensor::randn({2, 3}, 31).to(DType::F64);
  Tensor plain = ops::linear(x, w);
  ops::Bf16Compute on;
  EXPECT_TRUE(bitwise(ops::linear(x, w), plain));
  EXPECT_EQ(ops::linear(x, w).dtype(), DType::F64);
}

TEST(MixedPrecision, RoundingIsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even mantissa (1).
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
  Tensor t = Tensor::from_data<float>({1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, 1.f + 0x1p-9f, -2.5f}, {4});
  auto r = ops::round_to_bf16(t).to_double_vector();
  EXPECT_EQ(r[0], 1.0);
  EXPECT_EQ(r[1], 1.0 + 0x1p-6);
  EXPECT_EQ(r[2], 1.0);
  EXPECT_EQ(r[3], -2.5);
}

TEST(MixedPrecision, RejectsNonFloat32Tensors) {
  Tensor x = Tensor::randn({2}, 1).to(DType::F64);
  try {
    ops::round_to_bf16(x);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a float32 tensor, got float64"), std::string::npos)
        << e.what();
  }
}

TEST(MixedPrecision, CudaBf16MatchesCpuEmulation) {
  DDP_SKIP_WITHOUT_GPU();
  // Tensor-core GEMMs sum in another order than the CPU: agreement within a few bf16 ulps (2^-8 relative).
  ops::Bf16Compute on;
  ddp::testing::expect_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); },
      {leaf({8, 64}, 40), leaf({32, 64}, 41), leaf({32}, 42)}, 2e-2, 2e-2);
  // The bias in cuBLASLt's epilogue (kernels/cuda/linear_bf16.cu) on a GPT-sized and an odd shape (7 x 17
  // rows of 17 features into 33: unaligned leading dimensions, which cuBLASLt may refuse - then the fallback).
  ddp::testing::expect_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); },
      {leaf({2, 128, 768}, 46), leaf({2304, 768}, 47), leaf({2304}, 48)}, 2e-2, 2e-2);
  ddp::testing::expect_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); },
      {leaf({7, 17}, 49), leaf({33, 17}, 50), leaf({33}, 51)}, 2e-2, 2e-2);
  ddp::testing::expect_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
      {leaf({3, 16, 32}, 43), leaf({3, 32, 8}, 44)}, 2e-2, 2e-2);
  // The classifier's bf16 output (cuBLAS rounding its accumulator on the way out) on a GPT-like and an odd
  // shape; widened to float32 (ops::widen_bf16) for the comparison of values and gradients.
  for (const std::vector<Tensor>& in : {std::vector<Tensor>{leaf({2, 64, 768}, 52), leaf({512, 768}, 53)},
                                        std::vector<Tensor>{leaf({7, 17}, 54), leaf({33, 17}, 55)}})
    ddp::testing::expect_cuda_matches_cpu(
        [](const std::vector<Tensor>& v) { return ops::widen_bf16(ops::linear_bf16_output(v[0], v[1])); }, in,
        2e-2, 2e-2);
  ddp::testing::expect_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) { return ops::causal_self_attention(in[0], 4); },
      {leaf({2, 16, 96}, 45)}, 2e-2, 2e-2);
}
