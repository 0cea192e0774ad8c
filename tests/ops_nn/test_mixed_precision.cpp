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
#include "ops_nn_test_util.h"
#include "runtime/autograd/engine.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/linalg.h"
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
  ddp::testing::expect_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) { return ops::causal_self_attention(in[0], 4); },
      {leaf({2, 16, 96}, 45)}, 2e-2, 2e-2);
}
