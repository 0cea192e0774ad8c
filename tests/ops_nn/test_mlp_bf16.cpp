// test_mlp_bf16.cpp - the fused bf16 MLP (runtime/ops/mlp_bf16.h) on the CPU, where it is the exact emulation
// of the GPU's cuBLASLt path:
//   - the shared per-element math (kernels/cpu/mlp_bf16_epilogue.h) against the float64 GELU kernels and
//     BFloat16::from_float;
//   - the op's output and all five gradients bitwise against a reference built by hand at the documented
//     rounding points (the same float32 GEMMs on explicitly rounded operands, so the same summation order),
//     over awkward shapes (1, odd, prime sizes), with and without biases, and with zero rows;
//   - within bf16 tolerance of the float64 MLP and of today's unfused bf16 path (ops::linear / gelu / linear
//     under Bf16Compute);
//   - the cuBLASLt plan (which shapes fuse on the GPU), the argument errors, and the GPT's MLPBlock: fused
//     under bf16 compute, float32 bitwise as before, unfused while a child has forward hooks.
// tests/gpu/test_gpu_mlp_bf16.cpp compares the GPU with this emulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/mlp_bf16_epilogue.h"
#include "kernels/cuda/mlp_bf16_plan.h"
#include "models/gpt.h"
#include "ops_nn_test_util.h"
#include "runtime/autograd/engine.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/mixed_precision.h"
#include "runtime/ops/mlp_bf16.h"

using namespace ddp;
using ddp::testing::close_relative_to_max;
namespace kc = ddp::kernels::cpu;

namespace {
float r16(float v) { return BFloat16::from_float(v).to_float(); }

struct Mlp {
  Tensor x, w1, b1, w2, b2;  // leaves requiring grad (biases may be undefined)
  std::vector<Tensor> all() const { return {x, w1, b1, w2, b2}; }
};
Tensor leaf(const Shape& s, uint64_t seed, double stddev) {
  Tensor t = Tensor::randn(s, seed, DType::F32, stddev);
  t.set_requires_grad(true);
  return t;
}
Mlp make_mlp(const Shape& x_shape, int64_t hidden, int64_t out, bool bias, uint64_t seed) {
  const int64_t in = x_shape.back();
  Mlp m;
  m.x = leaf(x_shape, seed, 1.0);
  m.w1 = leaf({hidden, in}, seed + 1, 0.5);
  m.w2 = leaf({out, hidden}, seed + 3, 0.3);
  if (bias) {
    m.b1 = leaf({hidden}, seed + 2, 0.5);
    m.b2 = leaf({out}, seed + 4, 0.3);
  }
  return m;
}
Mlp copy_of(const Mlp& m, DType dtype) {
  auto c = [dtype](const Tensor& t) {
    if (!t.defined()) return Tensor();
    Tensor u = t.detach().to(dtype).clone();
    u.set_requires_grad(true);
    return u;
  };
  return {c(m.x), c(m.w1), c(m.b1), c(m.w2), c(m.b2)};
}

std::vector<float> floats(const Tensor& t) {
  const Tensor c = t.detach().to(DType::F32);
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}
std::vector<float> rounded(const Tensor& t) {
  std::vector<float> v = floats(t);
  for (float& f : v) f = r16(f);
  return v;
}
// C (M, N) = op(A) op(B) in float32 (the GEMM gemm_bf16 runs on the bf16 values), optionally into C's values.
std::vector<float> gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const std::vector<float>& A,
                        const std::vector<float>& B, std::vector<float> C = {}) {
  const float beta = C.empty() ? 0.f : 1.f;
  if (C.empty()) C.assign(static_cast<size_t>(M * N), 0.f);
  kc::gemm<float>(ta, tb, M, N, K, 1.f, A.data(), B.data(), beta, C.data());
  return C;
}
// float32 column sums (accumulated in double, as the column-sum kernels), rounded to bf16.
std::vector<float> rounded_column_sums(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> s(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r) acc += v[static_cast<size_t>(r * cols + c)];
    s[static_cast<size_t>(c)] = r16(static_cast<float>(acc));
  }
  return s;
}
std::vector<float> rounded_all(std::vector<float> v) {
  for (float& f : v) f = r16(f);
  return v;
}

// The op's output and gradients at the rounding points of mlp_bf16.h, by hand.
struct Reference {
  std::vector<float> y, dx, dw1, db1, dw2, db2;
};
Reference reference(const Mlp& m, const Tensor& g, int64_t hidden, int64_t out) {
  const int64_t in = m.x.size(-1), rows = m.x.numel() / in;
  const std::vector<float> xr = rounded(m.x), w1r = rounded(m.w1), w2r = rounded(m.w2), gr = rounded(g);
  const bool bias = m.b1.defined();
  const std::vector<float> b1 = bias ? rounded(m.b1) : std::vector<float>(hidden, 0.f);
  // forward: pre = acc + bf16(b1), hidden = bf16(gelu(pre)), pre kept as bf16; proj's bias stays float32
  const std::vector<float> acc1 = gemm(false, true, rows, hidden, in, xr, w1r);
  std::vector<float> h(acc1.size()), pre(acc1.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < hidden; ++j) {
      const size_t i = static_cast<size_t>(r * hidden + j);
      const float z = acc1[i] + b1[static_cast<size_t>(j)];
      h[i] = r16(kc::gelu_tanh(z));
      pre[i] = r16(z);
    }
  std::vector<float> y0;
  if (bias) {
    const std::vector<float> b2 = floats(m.b2);
    for (int64_t r = 0; r < rows; ++r) y0.insert(y0.end(), b2.begin(), b2.end());
  }
  Reference ref;
  ref.y = rounded_all(gemm(false, true, rows, out, hidden, h, w2r, y0));
  // backward
  ref.dw2 = rounded_all(gemm(true, false, out, hidden, rows, gr, h));
  ref.db2 = rounded_column_sums(gr, rows, out);
  const std::vector<float> dh = gemm(false, false, rows, hidden, out, gr, w2r);  // float32, not rounded
  std::vector<float> dpre(dh.size());
  for (size_t i = 0; i < dh.size(); ++i) dpre[i] = r16(dh[i] * kc::gelu_tanh_grad(pre[i]));
  ref.db1 = rounded_column_sums(dpre, rows, hidden);
  ref.dw1 = rounded_all(gemm(true, false, hidden, in, rows, dpre, xr));
  ref.dx = rounded_all(gemm(false, false, rows, in, hidden, dpre, w1r));
  return ref;
}

::testing::AssertionResult same_bits(const Tensor& t, const std::vector<float>& want) {
  const std::vector<float> got = floats(t);
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " elements, expected " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

Tensor run_fused(const Mlp& m) { return ops::mlp_bf16(m.x, m.w1, m.b1, m.w2, m.b2); }
Tensor run_composed(const Mlp& m) { return ops::linear(ops::gelu(ops::linear(m.x, m.w1, m.b1)), m.w2, m.b2); }

struct MlpShape {
  Shape x;
  int64_t hidden, out;
};
// rows/features at 1, odd and prime sizes, leading dimensions folded into rows, and a GPT-like one.
const MlpShape kShapes[] = {{{1, 1}, 1, 1},     {{7, 5}, 20, 5},  {{13, 3}, 7, 11},
                            {{2, 3, 8}, 32, 8}, {{5, 17}, 31, 2}, {{4, 16, 32}, 128, 32}};
}  // namespace

// ---- the per-element math the CPU emulation and the GPU fallback share ----

TEST(MlpBf16Epilogue, GeluAndItsDerivativeMatchTheFloat64KernelsToFloat32Precision) {
  std::vector<double> z;
  for (double v = -12; v <= 12; v += 0.0137) z.push_back(v);
  for (double v : {-1e4, -100.0, -60.0, -0.0, 0.0, 1e-30, -1e-30, 60.0, 100.0, 1e4}) z.push_back(v);
  std::vector<double> zf(z.size()), y(z.size()), dy(z.size()), ones(z.size(), 1.0);
  for (size_t i = 0; i < z.size(); ++i) zf[i] = static_cast<float>(z[i]);  // the float32 inputs, exactly
  kc::gelu_forward<double>(zf.data(), y.data(), static_cast<int64_t>(z.size()));
  kc::gelu_backward<double>(ones.data(), zf.data(), dy.data(), static_cast<int64_t>(z.size()));
  for (size_t i = 0; i < z.size(); ++i) {
    const float f = static_cast<float>(zf[i]);
    // float32 arithmetic with one expf: a few float32 ulps (2^-24 relative each), except that exp's argument
    // -2u carries a relative rounding error that exp turns into |2u| times as much (|2u| reaches 88 in the
    // tail); below float32's normal range (1.2e-38) absolute. The derivative crosses zero near z = -0.75,
    // where its error is absolute (a few ulps of its terms, which are ~1).
    const double two_u = std::abs(2 * 0.7978845608028654 * (zf[i] + 0.044715 * zf[i] * zf[i] * zf[i]));
    const double rel = (8 + 3 * std::min(two_u, 90.0)) * 0x1p-24;
    EXPECT_NEAR(kc::gelu_tanh(f), y[i], rel * std::abs(y[i]) + 1e-37) << "gelu at " << f;
    EXPECT_NEAR(kc::gelu_tanh_grad(f), dy[i], rel * std::abs(dy[i]) + 1e-6) << "gelu' at " << f;
  }
}

TEST(MlpBf16Epilogue, RoundingIsBFloat16sNearestEven) {
  // ties: 1 + 2^-8 -> 1 (even), 1 + 3 * 2^-8 -> 1 + 2^-6; specials; then pseudo-random bit patterns
  const float specials[] = {1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, -2.5f,     0.f,
                            -0.f,          INFINITY,          -INFINITY, NAN,
                            3.4e38f,       -3.4e38f,          1e-40f,    0x1.fffffep127f};
  for (float f : specials) EXPECT_EQ(kc::bf16_bits_nearest_even(f), BFloat16::from_float(f).bits) << f;
  EXPECT_EQ(kc::round_bf16_nearest_even(1.f + 0x1p-8f), 1.f);
  EXPECT_EQ(kc::round_bf16_nearest_even(1.f + 3 * 0x1p-8f), 1.f + 0x1p-6f);
  uint32_t u = 12345;
  for (int i = 0; i < 200000; ++i) {
    u = u * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &u, 4);
    ASSERT_EQ(kc::bf16_bits_nearest_even(f), BFloat16::from_float(f).bits) << "bits " << u;
    ASSERT_EQ(kc::bf16_bits_to_float(BFloat16::from_float(f).bits) == BFloat16::from_float(f).to_float() ||
                  std::isnan(f),
              true);
  }
}

TEST(MlpBf16Epilogue, EpiloguesRoundOnceFromTheFloat32Values) {
  // acc + bias = 1 + 2^-8 + 2^-20: its gelu and itself round once (not via an intermediate bf16 value)
  const float acc = 1.f + 0x1p-8f, bias = 0x1p-20f, z = acc + bias;
  const kc::GeluBiasBf16 e = kc::gelu_bias_epilogue(acc, bias);
  EXPECT_EQ(e.pre, BFloat16::from_float(z).bits);
  EXPECT_EQ(kc::bf16_bits_to_float(e.pre), 1.f + 0x1p-7f) << "z is just above the tie: rounds up";
  EXPECT_EQ(e.hidden, BFloat16::from_float(kc::gelu_tanh(z)).bits);
  const uint16_t pre = BFloat16::from_float(-0.5f).bits;
  EXPECT_EQ(kc::dgelu_epilogue(3.3f, pre), BFloat16::from_float(3.3f * kc::gelu_tanh_grad(-0.5f)).bits)
      << "the accumulator is not rounded before the product";
}

// ---- the op ----

TEST(MlpBf16, OutputAndAllGradientsAreTheDocumentedRoundingPointsBitwise) {
  uint64_t seed = 100;
  for (const MlpShape& s : kShapes)
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "x " << shape_str(s.x) << " hidden " << s.hidden << " out "
                                        << s.out << (bias ? " with" : " without") << " biases");
      const Mlp m = make_mlp(s.x, s.hidden, s.out, bias, seed += 10);
      Shape y_shape = s.x;
      y_shape.back() = s.out;
      const Tensor g = Tensor::randn(y_shape, seed + 7);
      const Tensor y = run_fused(m);
      ASSERT_EQ(y.shape(), y_shape);
      ASSERT_EQ(y.dtype(), DType::F32);
      autograd::backward({y}, {g});
      const Reference ref = reference(m, g, s.hidden, s.out);
      EXPECT_TRUE(same_bits(y, ref.y)) << "y";
      EXPECT_TRUE(same_bits(m.x.grad(), ref.dx)) << "dx";
      EXPECT_TRUE(same_bits(m.w1.grad(), ref.dw1)) << "dfc_W";
      EXPECT_TRUE(same_bits(m.w2.grad(), ref.dw2)) << "dproj_W";
      if (bias) {
        EXPECT_TRUE(same_bits(m.b1.grad(), ref.db1)) << "dfc_b";
        EXPECT_TRUE(same_bits(m.b2.grad(), ref.db2)) << "dproj_b";
      }
      for (const Tensor& t : m.all())
        if (t.defined()) {
          EXPECT_EQ(t.grad().dtype(), DType::F32) << "gradients stay float32";
        }
    }
}

TEST(MlpBf16, TracksTheFloat64MlpWithinBf16Tolerance) {
  // Every rounding is at most 2^-9 relative (half a bf16 ulp); the output passes ~4 of them (x, weights,
  // hidden, y) and a gradient ~6, partly averaging out in the GEMM sums: 2% of the largest reference value.
  uint64_t seed = 300;
  for (const MlpShape& s : kShapes)
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "x " << shape_str(s.x) << " hidden " << s.hidden << " out "
                                        << s.out << (bias ? " with" : " without") << " biases");
      const Mlp m = make_mlp(s.x, s.hidden, s.out, bias, seed += 10);
      const Mlp m64 = copy_of(m, DType::F64);
      const Tensor y = run_fused(m), y64 = run_composed(m64);
      EXPECT_TRUE(close_relative_to_max(y, y64, 2e-2)) << "y";
      const Tensor g = Tensor::randn(y.shape(), seed + 5);
      autograd::backward({y}, {g});
      autograd::backward({y64}, {g.to(DType::F64)});
      const char* names[] = {"dx", "dfc_W", "dfc_b", "dproj_W", "dproj_b"};
      const std::vector<Tensor> a = m.all(), b = m64.all();
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i].defined()) {
          EXPECT_TRUE(close_relative_to_max(a[i].grad(), b[i].grad(), 2e-2)) << names[i];
        }
    }
}

TEST(MlpBf16, TracksTodaysUnfusedBf16PathButRoundsLess) {
  // The unfused path rounds the pre-activation before the GELU and dL/dhidden before the GELU's derivative;
  // the fused op does not: close (same tolerance as against float64), not equal.
  const Mlp m = make_mlp({6, 7, 32}, 128, 32, true, 500);
  const Mlp u = copy_of(m, DType::F32);
  const Tensor y = run_fused(m);
  Tensor yu;
  {
    ops::Bf16Compute on;
    yu = run_composed(u);
  }
  EXPECT_TRUE(close_relative_to_max(y, yu, 2e-2));
  EXPECT_NE(y.to_double_vector(), yu.to_double_vector()) << "the rounding points did not change";
  const Tensor g = Tensor::randn(y.shape(), 501);
  autograd::backward({y}, {g});
  {
    ops::Bf16Compute on;
    autograd::backward({yu}, {g});
  }
  const std::vector<Tensor> a = m.all(), b = u.all();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(close_relative_to_max(a[i].grad(), b[i].grad(), 2e-2)) << i;
}

TEST(MlpBf16, ZeroRowsGiveAnEmptyOutputAndZeroWeightGradients) {
  const Mlp m = make_mlp({0, 6}, 10, 4, true, 600);
  const Tensor y = run_fused(m);
  ASSERT_EQ(y.shape(), (Shape{0, 4}));
  autograd::backward({y}, {Tensor::zeros({0, 4})});
  EXPECT_EQ(m.x.grad().shape(), (Shape{0, 6}));
  for (const Tensor& t : {m.w1, m.b1, m.w2, m.b2}) {
    ASSERT_TRUE(t.grad().defined());
    EXPECT_EQ(t.grad().shape(), t.shape());
    for (double v : t.grad().to_double_vector()) EXPECT_EQ(v, 0.0);
  }
}

TEST(MlpBf16, OnlyTheRequestedGradientsAndNoGraphWithoutGrad) {
  Mlp m = make_mlp({5, 8}, 16, 8, true, 700);
  m.x = m.x.detach();  // no gradient wanted for x
  const Tensor y = run_fused(m);
  autograd::backward({y}, {Tensor::randn(y.shape(), 701)});
  EXPECT_FALSE(m.x.grad().defined());
  EXPECT_TRUE(m.w1.grad().defined() && m.b1.grad().defined() && m.w2.grad().defined() &&
              m.b2.grad().defined());
  autograd::NoGradGuard no_grad;
  EXPECT_FALSE(run_fused(m).requires_grad());
}

TEST(MlpBf16, RejectsBadArgumentsNamingThem) {
  const Mlp m = make_mlp({3, 4}, 8, 4, true, 800);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { ops::mlp_bf16(m.x.to(DType::F64), m.w1, m.b1, m.w2, m.b2); }).find("x is float64"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::mlp_bf16(m.x, m.w1, m.b1, m.w1, m.b2); }).find("proj_weight"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::mlp_bf16(m.x, m.w1, m.b2, m.w2, m.b2); }).find("fc_bias has shape"),
            std::string::npos);
  EXPECT_NE(message([&] {
              ops::mlp_bf16(Tensor::randn({3, 5}, 1), m.w1, m.b1, m.w2, m.b2);
            }).find("expects a last dimension of 4"),
            std::string::npos);
  EXPECT_NE(message([&] {
              ops::mlp_bf16(m.x, Tensor::randn({0, 4}, 1), Tensor(), Tensor::randn({4, 0}, 2), Tensor());
            }).find("zero-size feature dimension"),
            std::string::npos);
}

// ---- the GPU's plan, decided on the host ----

TEST(MlpBf16Plan, CublasLtEpiloguesTakeOnlyAlignedShapes) {
  namespace kg = ddp::kernels::cuda;
  const auto* p = reinterpret_cast<const void*>(uintptr_t{0x10000});
  const auto* odd = reinterpret_cast<const void*>(uintptr_t{0x10004});  // 4-byte aligned only
  EXPECT_TRUE(kg::gelu_linear_fuses(1024, 3072, 768, p, p, p, p, p));
  EXPECT_TRUE(kg::gelu_linear_fuses(1, 8, 8, p, p, nullptr, p, p)) << "no bias";
  EXPECT_FALSE(kg::gelu_linear_fuses(0, 8, 8, p, p, p, p, p)) << "zero rows";
  EXPECT_FALSE(kg::gelu_linear_fuses(4, 20, 8, p, p, p, p, p)) << "aux leading dimension 20";
  EXPECT_FALSE(kg::gelu_linear_fuses(4, 16, 12, p, p, p, p, p)) << "x leading dimension 12";
  EXPECT_FALSE(kg::gelu_linear_fuses(4, 16, 16, p, p, odd, p, p)) << "bias not 16-byte aligned";
  EXPECT_FALSE(kg::gelu_linear_fuses(4, 16, 16, p, p, p, p, odd)) << "aux not 16-byte aligned";
  EXPECT_TRUE(kg::dgelu_matmul_fuses(1024, 3072, 768, p, p, p, p, p));
  EXPECT_TRUE(kg::dgelu_matmul_fuses(3, 16, 8, p, p, p, p, nullptr)) << "no bias gradient";
  EXPECT_FALSE(kg::dgelu_matmul_fuses(3, 12, 8, p, p, p, p, p)) << "hidden 12";
  EXPECT_FALSE(kg::dgelu_matmul_fuses(3, 16, 5, p, p, p, p, p)) << "g leading dimension 5";
  EXPECT_FALSE(kg::dgelu_matmul_fuses(3, 16, 8, p, p, p, p, odd)) << "bias gradient not aligned";
}

// ---- the GPT's MLP ----

TEST(MlpBf16, GptMlpBlockFusesUnderBf16AndIsUnchangedInFloat32) {
  models::GPTConfig c;
  c.d_model = 16;
  c.n_layer = 1;
  models::MLPBlock block(c);
  const Tensor x = Tensor::randn({2, 5, 16}, 900);
  autograd::NoGradGuard no_grad;
  const Tensor plain = ops::linear(ops::gelu(ops::linear(x, block.fc->weight, block.fc->bias)),
                                   block.proj->weight, block.proj->bias);
  EXPECT_EQ(block.forward(x).to_double_vector(), plain.to_double_vector()) << "float32 changed";
  ops::Bf16Compute on;
  const Tensor fused =
      ops::mlp_bf16(x, block.fc->weight, block.fc->bias, block.proj->weight, block.proj->bias);
  EXPECT_EQ(block.forward(x).to_double_vector(), fused.to_double_vector())
      << "bf16 did not take the fused op";
  // a child's forward pre-hook (ZeRO-2 waits for its gathers there) runs, and the op stays fused
  int pre_runs = 0, post_runs = 0;
  block.fc->add_forward_hooks(
      &pre_runs, [&](nn::Module&) { ++pre_runs; }, nullptr);
  block.proj->add_forward_hooks(
      &pre_runs, [&](nn::Module&) { ++pre_runs; }, nullptr);
  EXPECT_EQ(block.forward(x).to_double_vector(), fused.to_double_vector());
  EXPECT_EQ(pre_runs, 2);
  // a post-hook (a ZeRO-3 unit inside the MLP) needs the child's own output: the unfused path
  block.proj->add_forward_hooks(&post_runs, nullptr, [&](nn::Module&, const Tensor& y) {
    ++post_runs;
    return y;
  });
  const Tensor unfused = ops::linear(ops::gelu(ops::linear(x, block.fc->weight, block.fc->bias)),
                                     block.proj->weight, block.proj->bias);
  EXPECT_EQ(block.forward(x).to_double_vector(), unfused.to_double_vector());
  EXPECT_EQ(pre_runs, 4);
  EXPECT_EQ(post_runs, 1);
  block.fc->remove_forward_hooks(&pre_runs);
  block.proj->remove_forward_hooks(&pre_runs);
  block.proj->remove_forward_hooks(&post_runs);
}
