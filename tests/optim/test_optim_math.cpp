// test_optim_math.cpp - the per-element SGD and AdamW functions the CUDA kernels run
// (kernels/cpu/optim_math.h, single-tensor and multi-tensor alike) executed here on the host, against the CPU
// fused kernels (kernels/cpu/optim.cpp): the same bits for float32 and float64, every option, lengths with
// and without a vector tail, several steps with per-parameter bias corrections. The CPU kernels' MulAdd is
// one rounding on FMA targets (AVX2, AVX-512); on a target without FMA they round twice, so the comparison
// skips there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/optim.h"
#include "kernels/cpu/optim_math.h"
#include "kernels/cpu/simd_target.h"

using namespace ddp::kernels::cpu;

namespace {
bool fused_multiply_add_target() {
  const std::string name = simd_target_name();
  return name.rfind("AVX2", 0) == 0 || name.rfind("AVX3", 0) == 0 || name.rfind("AVX10", 0) == 0;
}
template <class T>
std::vector<T> values(int64_t n, double scale, int salt) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)  // magnitudes over several decades, both signs
    v[static_cast<size_t>(i)] = static_cast<T>(scale * std::sin(0.37 * static_cast<double>(i + 1) * salt) *
                                               std::pow(10.0, static_cast<double>(i % 7) - 3));
  return v;
}
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void sgd_case(double momentum, double dampening, double weight_decay, bool nesterov, int64_t n) {
  std::vector<T> w_kernel = values<T>(n, 1.0, 1), w_shared = w_kernel;
  std::vector<T> buf_kernel(static_cast<size_t>(n), T(0)), buf_shared = buf_kernel;
  const double lr = 0.05;
  const auto c = sgd_constants<T>(lr, momentum, dampening, weight_decay, nesterov);
  const bool has_buf = momentum != 0;
  for (int step = 0; step < 3; ++step) {
    const std::vector<T> g = values<T>(n, 0.5, step + 2);
    const bool first = step == 0;
    sgd_step<T>(w_kernel.data(), g.data(), has_buf ? buf_kernel.data() : nullptr, n, lr, momentum, dampening,
                weight_decay, nesterov, first);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i)
      w_shared[i] = sgd_update(w_shared[i], g[i], buf_shared[i], has_buf, first, c);
    ASSERT_TRUE(same_bits(w_kernel, w_shared)) << "weights, step " << step;
    ASSERT_TRUE(same_bits(buf_kernel, buf_shared)) << "momentum, step " << step;
  }
}

template <class T>
void adamw_case(double weight_decay, int64_t n) {
  std::vector<T> w_kernel = values<T>(n, 1.0, 1), w_shared = w_kernel;
  std::vector<T> m_kernel(static_cast<size_t>(n), T(0)), v_kernel = m_kernel, m_shared = m_kernel,
                                                         v_shared = m_kernel;
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const auto c = adamw_constants<T>(lr, b1, b2, eps, weight_decay);
  for (int step = 1; step <= 4; ++step) {
    const std::vector<T> g = values<T>(n, 0.5, step + 2);
    const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    adamw_step<T>(w_kernel.data(), g.data(), m_kernel.data(), v_kernel.data(), n, lr, b1, b2, eps,
                  weight_decay, bc1, bc2);
    const auto bc = adamw_bias_correction<T>(lr, bc1, bc2);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i)
      w_shared[i] = adamw_update(w_shared[i], g[i], m_shared[i], v_shared[i], c, bc);
    ASSERT_TRUE(same_bits(w_kernel, w_shared)) << "weights, step " << step;
    ASSERT_TRUE(same_bits(m_kernel, m_shared)) << "exp_avg, step " << step;
    ASSERT_TRUE(same_bits(v_kernel, v_shared)) << "exp_avg_sq, step " << step;
  }
}
}  // namespace

TEST(OptimMath, SgdSharedFunctionEqualsTheCpuKernelBitwise) {
  if (!fused_multiply_add_target())
    GTEST_SKIP() << "the CPU kernels run " << simd_target_name() << " (no FMA)";
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Case& k : {Case{0, 0, 0, false}, Case{0.9, 0, 0.01, false}, Case{0.9, 0.1, 0, false},
                        Case{0.8, 0, 0.05, true}, Case{0, 0, 0.1, false}})
    for (int64_t n : {1, 7, 16, 37, 300, 4099}) {
      SCOPED_TRACE(::testing::Message() << "momentum " << k.momentum << " dampening " << k.dampening << " wd "
                                        << k.weight_decay << " nesterov " << k.nesterov << " n " << n);
      sgd_case<float>(k.momentum, k.dampening, k.weight_decay, k.nesterov, n);
      sgd_case<double>(k.momentum, k.dampening, k.weight_decay, k.nesterov, n);
    }
}

TEST(OptimMath, AdamWSharedFunctionEqualsTheCpuKernelBitwise) {
  if (!fused_multiply_add_target())
    GTEST_SKIP() << "the CPU kernels run " << simd_target_name() << " (no FMA)";
  for (double wd : {0.0, 0.01})
    for (int64_t n : {1, 7, 16, 37, 300, 4099}) {
      SCOPED_TRACE(::testing::Message() << "wd " << wd << " n " << n);
      adamw_case<float>(wd, n);
      adamw_case<double>(wd, n);
    }
}

TEST(OptimMath, ConstantsAreFormedInDoubleAndRoundedOnce) {
  const auto c = adamw_constants<float>(1e-3, 0.9, 0.999, 1e-8, 0.01);
  EXPECT_EQ(c.one_minus_beta2, static_cast<float>(1.0 - 0.999));
  EXPECT_NE(c.one_minus_beta2, 1.0f - 0.999f) << "1 - 0.999f in float is 9.9998713e-4";
  EXPECT_EQ(c.decay, static_cast<float>(1.0 - 1e-3 * 0.01));
  const auto bc = adamw_bias_correction<float>(1e-3, 1 - 0.9, 1 - 0.999);
  EXPECT_EQ(bc.neg_step_size, static_cast<float>(-1e-3 / (1 - 0.9)));
  EXPECT_EQ(bc.sqrt_bc2, static_cast<float>(std::sqrt(1 - 0.999)));
  const auto s = sgd_constants<float>(0.05, 0.9, 0.3, 0.0, false);
  EXPECT_EQ(s.one_minus_dampening, static_cast<float>(1.0 - 0.3));
  EXPECT_FALSE(s.has_weight_decay);
}
