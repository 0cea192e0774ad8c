// test_fast_math_targets.cpp - the float32 fast paths of simd-inl.h on every instruction set the dispatcher
// can pick here, held to their stated error bounds: LogFastF32 (through log_forward) over a sweep of the
// whole float range with every IEEE case, the base-2 exp of the softmax family (Exp2NonPositiveF32 through
// softmax_forward, Exp2SumTermF32 through cross_entropy_forward's log-sum-exp and log_softmax_forward).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/softmax.h"
#include "tests/ops_simd/simd_test_util.h"

using namespace ddp;
using namespace ddp::testing;
namespace kc = ddp::kernels::cpu;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
// |y - ref| in units of the float32 spacing at ref (the ulp of ref rounded to float).
double ulps(float y, double ref) {
  const float r = std::fabs(static_cast<float>(ref));
  const double ulp = static_cast<double>(std::nextafter(r, kInf)) - static_cast<double>(r);
  return std::fabs(static_cast<double>(y) - ref) / ulp;
}
}  // namespace

// Stated bound of LogFastF32: 1 ulp + 3e-8 relative (the fitted polynomial's error); checked here as at most
// 1.5 ulp on every float bit pattern in a stride-509 sweep of (0, inf) (subnormals included) and on every
// 8th float in [0.5, 2), where log is small and its relative accuracy is hardest.
TEST(FastMathTargets, LogFloat32WithinBoundOverTheWholeRangeOnEveryTarget) {
  std::vector<float> x;
  for (uint32_t b = 1; b < 0x7f800000u; b += 509) x.push_back(from_bits(b));
  for (uint32_t b = 0x3f000000u; b < 0x40000000u; b += 8) x.push_back(from_bits(b));
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = std::log(static_cast<double>(x[i]));
  for_each_simd_target([&](const std::string&) {
    std::vector<float> y(x.size());
    kc::log_forward(x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = ulps(y[i], ref[i]);
      if (!(e <= worst)) worst = e, worst_i = i;
    }
    EXPECT_LE(worst, 1.5) << "log(" << x[worst_i] << ") = " << y[worst_i] << ", reference " << ref[worst_i];
  });
}

TEST(FastMathTargets, LogFloat32IeeeCasesOnEveryTarget) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm_min = std::numeric_limits<float>::denorm_min(), fmin = std::numeric_limits<float>::min();
  const float fmax = std::numeric_limits<float>::max();
  // One special value among ordinary ones in the same vector (the slow path must not disturb its lanes).
  const std::vector<float> x = {0.0f, -0.0f, -1.0f, -kInf,  kInf, nan,   denorm_min, fmin, fmax,
                                1.0f, 2.0f,  0.5f,  3e-39f, 7.0f, 1e-3f, 1e30f,      1.0f, 2.0f};
  for_each_simd_target([&](const std::string&) {
    // every alignment of the values against the vector lanes
    for (size_t shift = 0; shift < 16; ++shift) {
      std::vector<float> xs(shift, 1.5f);
      xs.insert(xs.end(), x.begin(), x.end());
      std::vector<float> y(xs.size());
      kc::log_forward(xs.data(), y.data(), static_cast<int64_t>(xs.size()));
      for (size_t i = 0; i < xs.size(); ++i) {
        const float v = xs[i];
        SCOPED_TRACE(::testing::Message() << "log(" << v << ") shift " << shift);
        if (std::isnan(v) || v < 0) {
          EXPECT_TRUE(std::isnan(y[i])) << y[i];
        } else if (v == 0) {
          EXPECT_EQ(y[i], -kInf);
        } else if (std::isinf(v)) {
          EXPECT_EQ(y[i], kInf);
        } else {
          EXPECT_LE(ulps(y[i], std::log(static_cast<double>(v))), 1.5) << y[i];
        }
      }
      EXPECT_EQ(y[shift + 9], 0.0f) << "log(1) must be exactly 0";
    }
  });
}

// Exp2NonPositiveF32 through softmax of rows [0, t]: the second output is e^t / (1 + e^t). Stated bound of
// the exp: 2.5e-7 relative plus 7.5e-8 |t| (z = t log2(e) rounded to float; log2(e) rounded); the softmax
// adds the sum's and the scale's roundings. Results below about 2^-125 are 0 (AVX-512: the subnormal value
// itself, from vscalefps), exp(-inf) is exactly 0.
TEST(FastMathTargets, SoftmaxExpMatchesFloat64DownToTheFlushOnEveryTarget) {
  std::vector<float> x;
  std::vector<double> ref;
  for (int i = 0; i <= 40000; ++i) {
    const float t = -87.0f * static_cast<float>(i) / 40000.0f;
    x.push_back(0.0f);
    x.push_back(t);
    const double e = std::exp(static_cast<double>(t));
    ref.push_back(1 / (1 + e));
    ref.push_back(e / (1 + e));
  }
  for (float t : {-kInf, -100.0f, -88.0f}) {  // 0 or subnormal
    x.push_back(0.0f);
    x.push_back(t);
    ref.push_back(1);
    ref.push_back(std::exp(static_cast<double>(t)));
  }
  const int64_t rows = static_cast<int64_t>(x.size() / 2);
  for_each_simd_target([&](const std::string&) {
    std::vector<float> y(x.size());
    kc::softmax_forward(x.data(), y.data(), rows, 2);
    for (size_t i = 0; i < y.size(); ++i) {
      if (std::isinf(x[i | 1])) continue;  // checked exactly below
      const double t = std::fabs(static_cast<double>(x[i | 1]));
      const double tol = (5e-7 + 8e-8 * t) * ref[i] + (t > 86.5 ? 3e-38 : 0.0);
      ASSERT_LE(std::fabs(static_cast<double>(y[i]) - ref[i]), tol)
          << "softmax([0, " << x[i | 1] << "])[" << (i & 1) << "] = " << y[i] << ", reference " << ref[i];
    }
    for (size_t i = y.size() - 6; i < y.size(); i += 2) {
      EXPECT_EQ(y[i], 1.0f);
      // flushed to 0, or the subnormal within a few of its spacings (2^-149)
      const bool flushed = y[i + 1] == 0.0f;
      EXPECT_TRUE(flushed || std::fabs(static_cast<double>(y[i + 1]) - ref[i + 1]) <=
                                 4 * 1.401298464e-45 + 1e-3 * ref[i + 1])
          << "exp(" << x[i + 1] << ") = " << y[i + 1] << ", reference " << ref[i + 1];
    }
    EXPECT_EQ(y[y.size() - 5], 0.0f) << "exp(-inf) must be exactly 0";
  });
}

// Exp2SumTermF32 through the log-sum-exp of cross_entropy_forward and log_softmax_forward: rows of many
// magnitudes (spread over [-120, 40] around a per-row offset), -inf entries (masked logits) and every tail
// length. The sum's relative error is the terms' (2.5e-7 + |z| 2^-24 each, weighted by the terms), then one
// float log and the rounding of the result: |lse - ref| <= 1e-6 + 2e-7 |ref|.
// Rows of huge magnitude: x - max is formed first, so nothing depends on the size of the logits.
TEST(FastMathTargets, SoftmaxFamilyOfHugeLogitsOnEveryTarget) {
  const std::vector<float> x = {3e20f, 1e20f, -1e20f, 0.0f, -3e37f, 3e37f, 3e37f, 1e37f};
  for_each_simd_target([&](const std::string&) {
    std::vector<float> y(8), ly(8), lse(2);
    std::vector<int64_t> targets = {0, 1};
    int64_t count = 0;
    kc::softmax_forward(x.data(), y.data(), 2, 4);
    kc::log_softmax_forward(x.data(), ly.data(), 2, 4);
    const double loss =
        kc::cross_entropy_forward(x.data(), targets.data(), 2, 4, false, -100, lse.data(), &count);
    EXPECT_EQ(y, (std::vector<float>{1, 0, 0, 0, 0, 0.5f, 0.5f, 0}));
    EXPECT_EQ(ly[0], 0.0f);
    EXPECT_EQ(ly[1], -2e20f);
    EXPECT_EQ(lse[0], 3e20f);
    EXPECT_EQ(lse[1], 3e37f);  // 3e37 + log 2 rounds to 3e37
    EXPECT_EQ(loss, 0.0);
  });
}

TEST(FastMathTargets, LogSumExpMatchesFloat64OnEveryTarget) {
  for (int64_t cols : {1, 2, 3, 15, 17, 33, 256, 1000}) {
    const int64_t rows = 37;  // more than two blocks of 16 rows, the last one partial
    std::vector<float> x(static_cast<size_t>(rows * cols));
    const std::vector<double> v = spread(rows * cols, -120, 40);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        // rows of a narrow range (every term counts) and of a wide one (most terms underflow)
        x[i] = static_cast<float>(r % 3 == 0 ? v[i] : (r % 3 == 1 ? 0.05 * v[i] + r : v[i] * 0.3 - 50));
        if (cols > 1 && c % 7 == 3) x[i] = -kInf;
      }
    std::vector<double> lse_ref(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      double m = -INFINITY, s = 0;
      for (int64_t c = 0; c < cols; ++c) m = std::max(m, static_cast<double>(x[r * cols + c]));
      for (int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(x[r * cols + c]) - m);
      lse_ref[r] = m + std::log(s);
    }
    std::vector<int64_t> targets(static_cast<size_t>(rows), 0);
    for_each_simd_target([&](const std::string&) {
      std::vector<float> lse(static_cast<size_t>(rows)), y(x.size());
      int64_t count = 0;
      kc::cross_entropy_forward(x.data(), targets.data(), rows, cols, false, -100, lse.data(), &count);
      kc::log_softmax_forward(x.data(), y.data(), rows, cols);
      for (int64_t r = 0; r < rows; ++r) {
        const double tol = 1e-6 + 2e-7 * std::fabs(lse_ref[r]);
        EXPECT_NEAR(lse[r], lse_ref[r], tol) << "cross-entropy log-sum-exp, row " << r << " cols " << cols;
        for (int64_t c = 0; c < cols; ++c) {
          const float xv = x[r * cols + c];
          const double want = static_cast<double>(xv) - lse_ref[r];
          if (std::isinf(xv)) {
            EXPECT_EQ(y[r * cols + c], -kInf);
            continue;
          }
          // x - lse rounded once more, relative to |x| + |lse|
          const double tol_y = tol + 1.2e-7 * (std::fabs(xv) + std::fabs(lse_ref[r]));
          ASSERT_NEAR(y[r * cols + c], want, tol_y)
              << "log_softmax row " << r << " col " << c << " cols " << cols;
        }
      }
    });
  }
}

// cross_entropy_forward finds each 16-row block's maxima while the previous block's exps run (the maxima
// are handed from one block to the next). A row's log-sum-exp must not depend on that: one call over 50 rows
// (three whole blocks and a partial one) against 50 calls of one row each, bitwise, with rows that take the
// other paths next to ordinary ones (a huge max: x - max first; +inf, NaN, an all -inf row) at block edges.
TEST(FastMathTargets, CrossEntropyRowsDoNotDependOnTheirBlockOnEveryTarget) {
  for (int64_t cols : {17, 256}) {
    const int64_t rows = 50;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    const std::vector<double> v = spread(rows * cols, -30, 30);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(v[i] * (1 + static_cast<double>(i % 5)));
    auto row = [&](int64_t r) { return x.begin() + r * cols; };
    std::fill(row(15), row(15) + cols, 3e25f);  // last row of block 0: the next block's maxima meanwhile
    row(16)[3] = 4e25f;                         // first of block 1, a huge max
    row(31)[cols - 1] = kInf;
    row(32)[5] = std::numeric_limits<float>::quiet_NaN();
    std::fill(row(47), row(47) + cols, -kInf);
    row(48)[0] = -3e30f;
    std::vector<int64_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) targets[static_cast<size_t>(r)] = (r * 7) % cols;
    for_each_simd_target([&](const std::string&) {
      std::vector<float> lse(static_cast<size_t>(rows)), one(static_cast<size_t>(rows));
      int64_t count = 0;
      kc::cross_entropy_forward(x.data(), targets.data(), rows, cols, false, -100, lse.data(), &count);
      for (int64_t r = 0; r < rows; ++r)
        kc::cross_entropy_forward(x.data() + r * cols, targets.data() + r, 1, cols, false, -100,
                                  one.data() + r, &count);
      for (int64_t r = 0; r < rows; ++r) {
        if (std::isnan(one[static_cast<size_t>(r)])) {
          EXPECT_TRUE(std::isnan(lse[static_cast<size_t>(r)])) << "row " << r << " cols " << cols;
          continue;
        }
        EXPECT_EQ(to_bits(lse[static_cast<size_t>(r)]), to_bits(one[static_cast<size_t>(r)]))
            << "row " << r << " cols " << cols << ": " << lse[static_cast<size_t>(r)] << " vs "
            << one[static_cast<size_t>(r)];
      }
      // and the rows of special values as torch.logsumexp gives them
      EXPECT_EQ(lse[15], 3e25f);
      EXPECT_EQ(lse[31], kInf);
      EXPECT_TRUE(std::isnan(lse[32]));
      EXPECT_EQ(lse[47], -kInf);
    });
  }
}

// ExpFast (exp_forward, float32): within 2 ulp of exp(x) wherever the result is above 2^-125, on every 1021st
// float of [-87.3, 88.7] and every 67th of 1/16 <= |x| <= 1 (the results near 1, where an ulp is smallest
// against the function's slope); sigmoid, cross-entropy backward and log_softmax backward use the same
// function.
TEST(FastMathTargets, ExpFloat32WithinTwoUlpOnEveryTarget) {
  std::vector<float> x;
  for (uint32_t b = 0; b <= 0x42b1999au; b += 1021) x.push_back(from_bits(b));   // [0, 88.8]
  for (uint32_t b = 0; b <= 0x42aea000u; b += 1021) x.push_back(-from_bits(b));  // [-87.3, 0]
  for (uint32_t b = 0x3d800000u; b <= 0x3f800000u; b += 67)
    x.push_back(from_bits(b)), x.push_back(-from_bits(b));
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = std::exp(static_cast<double>(x[i]));
  for_each_simd_target([&](const std::string&) {
    std::vector<float> y(x.size());
    kc::exp_forward(x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (ref[i] > 3.4028234e38 || ref[i] < 2.3509887e-38) continue;  // overflow, or below 2^-125 (flushed)
      const double e = ulps(y[i], ref[i]);
      if (!(e <= worst)) worst = e, wi = i;
    }
    EXPECT_LE(worst, 2.0) << "exp(" << x[wi] << ") = " << y[wi] << ", reference " << ref[wi];
    std::printf("  exp float32: worst %.2f ulp at x = %.9g\n", worst, x[wi]);
  });
}

// TanhBase2F32 (tanh_forward, float32): relative error at most 3e-7 over every 16th float of magnitude in
// [2^-20, 10] (every 97th float, both signs) and beyond.
TEST(FastMathTargets, TanhFloat32WithinBoundOnEveryTarget) {
  std::vector<float> x;
  for (uint32_t b = 0x35800000u; b <= 0x41200000u; b += 97)
    x.push_back(from_bits(b)), x.push_back(-from_bits(b));
  for (float v : {1e-30f, -1e-38f, 10.5f, 20.0f, -1e4f}) x.push_back(v);
  for_each_simd_target([&](const std::string&) {
    std::vector<float> y(x.size());
    kc::tanh_forward(x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double ref = std::tanh(static_cast<double>(x[i]));
      const double e = std::fabs(static_cast<double>(y[i]) - ref) / std::fabs(ref);
      if (!(e <= worst)) worst = e, wi = i;
    }
    EXPECT_LE(worst, 3e-7) << "tanh(" << x[wi] << ") = " << y[wi] << ", relative error " << worst;
  });
}

// GeluForward float32 (Exp2ClampedF32): relative error against x / (1 + exp(-2u)) in float64 at the float
// input. 2u is formed in float (rounded), and exp(-2u) amplifies that rounding by |2u| (up to 66 at x = -9),
// so the bound is 3e-7 + 1.8e-7 |2u| (2.5 float ulp of 2u); below x = -9.2 the result is under 6e-39 |x|.
TEST(FastMathTargets, GeluFloat32WithinBoundOnEveryTarget) {
  std::vector<float> x;
  for (int i = -400000; i <= 400000; ++i) x.push_back(static_cast<float>(i) * 2.5e-5f);  // [-10, 10]
  for (float v : {-30.0f, -1e4f, 30.0f, 1e-30f, -1e-30f}) x.push_back(v);
  for_each_simd_target([&](const std::string&) {
    std::vector<float> y(x.size());
    kc::gelu_forward(x.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i], two_u = 2 * std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
      const double ref = v / (1 + std::exp(-two_u));
      const double tol =
          (3e-7 + 1.8e-7 * std::fabs(two_u)) * std::fabs(ref) + (v < -9.2 ? 6e-39 * std::fabs(v) : 0.0);
      ASSERT_LE(std::fabs(static_cast<double>(y[i]) - ref), tol)
          << "gelu(" << x[i] << ") = " << y[i] << ", reference " << ref;
    }
  });
}
