// test_rows_targets.cpp - the row kernels (softmax, log-softmax, cross-entropy, layer norm, causal attention)
// and the fused optimizer steps on every instruction set the dispatcher can pick on this machine: float32
// within stated tolerances of float64 references written here as plain loops, for row lengths that exercise
// whole vectors and every tail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/softmax.h"
#include "tests/ops_simd/simd_test_util.h"

using namespace ddp;
using namespace ddp::testing;
namespace kc = ddp::kernels::cpu;

namespace {
// Float32 tolerance of the row kernels: sums of up to ~100 terms and one exp/log per element.
constexpr double kAtol = 2e-6, kRtol = 2e-5;

// Reference softmax of a float row, in double.
std::vector<double> softmax_ref(const std::vector<float>& x, int64_t rows, int64_t cols, bool log) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, static_cast<double>(x[r * cols + c]));
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = log ? x[r * cols + c] - m - std::log(s) : std::exp(x[r * cols + c] - m) / s;
  }
  return y;
}
}  // namespace

// 37 rows: two whole blocks of 16 rows (the forward kernels' unit, whose 16 row sums are reduced together on
// AVX-512) and a partial one; every row differs, so a row's result landing in another row's place shows.
TEST(RowKernelTargets, SoftmaxFamilyMatchesFloat64OnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    for (int64_t cols : {1, 5, 16, 17, 40, 100}) {
      const int64_t rows = 37, n = rows * cols;
      const std::vector<float> x = cast_to<float>(spread(n, -8, 8)), dy = cast_to<float>(spread(n, -1, 1.5));
      std::vector<float> y(n), dx(n);
      kc::softmax_forward(x.data(), y.data(), rows, cols);
      const std::vector<double> sref = softmax_ref(x, rows, cols, false);
      EXPECT_TRUE(close_to(y, sref, kAtol, kRtol)) << "softmax cols " << cols;
      kc::softmax_backward(y.data(), dy.data(), dx.data(), rows, cols);
      std::vector<double> bref(n);
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) s += double(y[r * cols + c]) * dy[r * cols + c];
        for (int64_t c = 0; c < cols; ++c)
          bref[r * cols + c] = double(y[r * cols + c]) * (dy[r * cols + c] - s);
      }
      EXPECT_TRUE(close_to(dx, bref, kAtol, kRtol)) << "softmax backward cols " << cols;

      kc::log_softmax_forward(x.data(), y.data(), rows, cols);
      EXPECT_TRUE(close_to(y, softmax_ref(x, rows, cols, true), kAtol, kRtol)) << "log_softmax cols " << cols;
      kc::log_softmax_backward(y.data(), dy.data(), dx.data(), rows, cols);
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) s += dy[r * cols + c];
        for (int64_t c = 0; c < cols; ++c)
          bref[r * cols + c] = dy[r * cols + c] - std::exp(double(y[r * cols + c])) * s;
      }
      EXPECT_TRUE(close_to(dx, bref, kAtol, kRtol)) << "log_softmax backward cols " << cols;

      // cross-entropy: lse per row and the loss sum; backward = (softmax - onehot) * dloss / rows
      std::vector<int64_t> t(rows);
      for (int64_t r = 0; r < rows; ++r) t[r] = (r * 3) % cols;
      std::vector<float> lse(rows);
      int64_t count = 0;
      const double total =
          kc::cross_entropy_forward(x.data(), t.data(), rows, cols, false, -100, lse.data(), &count);
      const std::vector<double> lref = softmax_ref(x, rows, cols, true);
      double total_ref = 0;
      for (int64_t r = 0; r < rows; ++r) total_ref -= lref[r * cols + t[r]];
      EXPECT_EQ(count, rows);
      EXPECT_NEAR(total, total_ref, kAtol * rows + kRtol * std::fabs(total_ref))
          << "cross_entropy cols " << cols;
      const float dl = 1.5f;
      kc::cross_entropy_backward(x.data(), t.data(), lse.data(), &dl, double(rows), rows, cols, false, -100,
                                 dx.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          bref[r * cols + c] = 1.5 / rows * (std::exp(lref[r * cols + c]) - (c == t[r] ? 1.0 : 0.0));
      EXPECT_TRUE(close_to(dx, bref, kAtol, kRtol)) << "cross_entropy backward cols " << cols;
    }
  });
}

TEST(RowKernelTargets, LayerNormMatchesFloat64OnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    // 67 rows: a block of 64 rows plus 3 (the partial dweight / dbias rows), sub-blocks of 12 rows ending in
    // 4
    // + 3 (backward's four-row and one-row paths).
    for (int64_t rows : {4, 67})
      for (int64_t cols : {1, 5, 16, 17, 100, 128}) {
        const int64_t n = rows * cols;
        const std::vector<float> x = cast_to<float>(spread(n, -3, 5)), dy = cast_to<float>(spread(n, -1, 1)),
                                 w = cast_to<float>(spread(cols, 0.5, 1.5)),
                                 b = cast_to<float>(spread(cols, -0.2, 0.3));
        std::vector<float> y(n), mean(rows), rstd(rows), dx(n), dw(cols), db(cols);
        kc::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, cols,
                              1e-5);
        std::vector<double> yref(n), xhat(n), dxref(n), dwref(cols, 0), dbref(cols, 0);
        for (int64_t r = 0; r < rows; ++r) {
          double m = 0, v = 0;
          for (int64_t c = 0; c < cols; ++c) m += x[r * cols + c];
          m /= cols;
          for (int64_t c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
          const double rs = 1 / std::sqrt(v / cols + 1e-5);
          double sg = 0, sgx = 0;
          for (int64_t c = 0; c < cols; ++c) {
            xhat[r * cols + c] = (x[r * cols + c] - m) * rs;
            yref[r * cols + c] = xhat[r * cols + c] * w[c] + b[c];
            dwref[c] += double(dy[r * cols + c]) * xhat[r * cols + c];
            dbref[c] += dy[r * cols + c];
            sg += double(dy[r * cols + c]) * w[c];
            sgx += double(dy[r * cols + c]) * w[c] * xhat[r * cols + c];
          }
          for (int64_t c = 0; c < cols; ++c)
            dxref[r * cols + c] =
                rs * (double(dy[r * cols + c]) * w[c] - sg / cols - xhat[r * cols + c] * sgx / cols);
        }
        // cols = 1: the centred value must be exactly 0 (x - mean formed before scaling by rstd =
        // 1/sqrt(eps)); y and dx are still checked with an absolute tolerance scaled up for rstd = 316.
        const double scale = cols == 1 ? 400 : 1;
        EXPECT_TRUE(close_to(y, yref, kAtol * scale, kRtol)) << "layernorm rows " << rows << " cols " << cols;
        kc::layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(),
                               db.data(), rows, cols);
        EXPECT_TRUE(close_to(dx, dxref, 1e-5 * scale, 1e-4))
            << "layernorm dx rows " << rows << " cols " << cols;
        EXPECT_TRUE(close_to(dw, dwref, kAtol, kRtol))
            << "layernorm dweight rows " << rows << " cols " << cols;
        EXPECT_TRUE(close_to(db, dbref, kAtol, kRtol)) << "layernorm dbias rows " << rows << " cols " << cols;
      }
  });
}

TEST(RowKernelTargets, CausalAttentionForwardMatchesFloat64OnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    const int64_t B = 2, T = 19, C = 8, H = 2, hs = C / H;
    const std::vector<float> qkv = cast_to<float>(spread(B * T * 3 * C, -2, 2));
    std::vector<float> y(B * T * C), att(B * H * T * T);
    kc::attention_forward(qkv.data(), y.data(), att.data(), B, T, C, H);
    std::vector<double> yref(y.size(), 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i) {
          std::vector<double> s(i + 1);
          double m = -INFINITY, sum = 0;
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < hs; ++e)
              dot +=
                  double(qkv[(b * T + i) * 3 * C + h * hs + e]) * qkv[(b * T + j) * 3 * C + C + h * hs + e];
            s[j] = dot / std::sqrt(double(hs));
            m = std::max(m, s[j]);
          }
          for (int64_t j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - m));
          for (int64_t j = 0; j <= i; ++j)
            for (int64_t e = 0; e < hs; ++e)
              yref[(b * T + i) * C + h * hs + e] +=
                  s[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + e];
          for (int64_t j = i + 1; j < T; ++j) EXPECT_EQ(att[((b * H + h) * T + i) * T + j], 0.0f);
        }
    EXPECT_TRUE(close_to(y, yref, kAtol, kRtol));
  });
}

TEST(OptimizerKernelTargets, SgdAndAdamWFloat32MatchFloat64OnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    for (int64_t n : test_lengths()) {
      const std::vector<double> w0 = spread(n, -1, 1), g = spread(n, -0.3, 0.5);
      // SGD with momentum, nesterov and weight decay, two steps (first step initialises the buffer)
      std::vector<float> w = cast_to<float>(w0), gf = cast_to<float>(g), buf(n);
      std::vector<double> wr(w.begin(), w.end()), br(n);
      for (int step = 0; step < 2; ++step) {
        kc::sgd_step(w.data(), gf.data(), buf.data(), n, 0.1, 0.9, 0.0, 0.01, true, step == 0);
        for (int64_t i = 0; i < n; ++i) {
          double d = double(gf[i]) + 0.01 * wr[i];
          br[i] = step == 0 ? d : 0.9 * br[i] + d;
          wr[i] -= 0.1 * (d + 0.9 * br[i]);
        }
      }
      EXPECT_TRUE(close_to(w, wr, 1e-6, 1e-6)) << "sgd n " << n;
      EXPECT_TRUE(close_to(buf, br, 1e-6, 1e-6)) << "sgd buffer n " << n;
      // AdamW, one step from zero state
      std::vector<float> wa = cast_to<float>(w0), m(n), v(n);
      kc::adamw_step(wa.data(), gf.data(), m.data(), v.data(), n, 1e-2, 0.9, 0.999, 1e-8, 0.01, 1 - 0.9,
                     1 - 0.999);
      std::vector<double> war(n), mr(n), vr(n);
      for (int64_t i = 0; i < n; ++i) {
        const double gi = gf[i];
        mr[i] = 0.1 * gi;
        vr[i] = 0.001 * gi * gi;
        war[i] =
            double(float(w0[i])) * (1 - 1e-2 * 0.01) - 1e-2 / 0.1 * mr[i] / (std::sqrt(vr[i] / 0.001) + 1e-8);
      }
      EXPECT_TRUE(close_to(wa, war, 1e-6, 1e-6)) << "adamw n " << n;
      EXPECT_TRUE(close_to(m, mr, 1e-9, 1e-6)) << "adamw exp_avg n " << n;
      EXPECT_TRUE(close_to(v, vr, 1e-12, 1e-6)) << "adamw exp_avg_sq n " << n;
    }
  });
}

TEST(DropoutKernelTargets, MaskIsBitIdenticalToTheCounterFormulaOnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    for (int64_t n : test_lengths()) {
      const std::vector<float> x = cast_to<float>(spread(n, -2, 2));
      std::vector<float> y(n);
      const uint64_t key = kc::dropout_key(42), threshold = kc::dropout_threshold(0.3);
      // The kernel steps the hash input by additions; an offset just below 2^64 makes the counter wrap.
      for (uint64_t offset : {uint64_t(1000), UINT64_MAX - 500}) {
        kc::dropout_apply(x.data(), y.data(), n, key, offset, threshold, 1.0f / 0.7f);
        for (int64_t i = 0; i < n; ++i) {
          const float expect = kc::dropout_keep(key, offset + static_cast<uint64_t>(i), threshold)
                                   ? x[i] * (1.0f / 0.7f)
                                   : 0.0f;
          ASSERT_EQ(y[i], expect) << "element " << i << " of " << n << " offset " << offset;
        }
      }
    }
  });
}

// The causal softmax holds a row in registers when the context is whole vectors of at most 8 (T = 64 at
// float32 with AVX-512 or AVX2, at float64 with AVX-512) and runs the loop otherwise (T = 65). Rows 0..63 of
// the attention see the same products and inputs at both contexts, so their probabilities - and the zeros
// after each row - must be the same bits: the register path computes what the loop computes.
TEST(RowKernelTargets, CausalSoftmaxInRegistersGivesTheBitsOfTheLoopOnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    const int64_t B = 2, C = 8, H = 2, T0 = 64, T1 = 65;
    auto run = [&](auto zero) {
      using S = decltype(zero);
      std::vector<S> qkv1(B * T1 * 3 * C), qkv0(B * T0 * 3 * C);
      const std::vector<double> v = spread(B * T1 * 3 * C, -3, 3);
      for (size_t i = 0; i < qkv1.size(); ++i) qkv1[i] = static_cast<S>(v[i]);
      for (int64_t b = 0; b < B; ++b)  // the first 64 tokens of each sequence
        std::copy(qkv1.begin() + b * T1 * 3 * C, qkv1.begin() + (b * T1 + T0) * 3 * C,
                  qkv0.begin() + b * T0 * 3 * C);
      std::vector<S> y0(B * T0 * C), y1(B * T1 * C), att0(B * H * T0 * T0), att1(B * H * T1 * T1);
      kc::attention_forward(qkv0.data(), y0.data(), att0.data(), B, T0, C, H);
      kc::attention_forward(qkv1.data(), y1.data(), att1.data(), B, T1, C, H);
      for (int64_t p = 0; p < B * H; ++p)
        for (int64_t i = 0; i < T0; ++i) {
          const S* r0 = att0.data() + (p * T0 + i) * T0;
          const S* r1 = att1.data() + (p * T1 + i) * T1;
          ASSERT_EQ(std::memcmp(r0, r1, T0 * sizeof(S)), 0) << "pair " << p << " row " << i;
          ASSERT_EQ(r1[T0], S(0));
        }
    };
    run(0.0f);
    run(0.0);
  });
}

// Empty heads and contexts straight into the kernels (the op returns before them): nothing to compute, and no
// library complaint on the output (OpenBLAS's transpose refuses a zero dimension by printing "On entry to
// SOMATCOPY parameter ... had an illegal value"); with head size 0 every score is 0, so row i is uniform.
TEST(RowKernelTargets, CausalAttentionOfEmptyHeadsOrContextsIsQuiet) {
  std::vector<float> qkv(8, 0.5f), y(8, 7.0f), att(16, 7.0f), dy(8, 1.0f), dqkv(8, 7.0f);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  kc::attention_forward(qkv.data(), y.data(), att.data(), 1, 0, 4, 2);  // T = 0
  kc::attention_backward(dy.data(), qkv.data(), att.data(), dqkv.data(), 1, 0, 4, 2);
  kc::attention_forward(qkv.data(), y.data(), att.data(), 1, 3, 0, 1);  // C = 0: head size 0
  kc::attention_backward(dy.data(), qkv.data(), att.data(), dqkv.data(), 1, 3, 0, 1);
  const std::string out = ::testing::internal::GetCapturedStdout() + ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "");
  const std::vector<float> uniform = {1, 0, 0, 0.5f, 0.5f, 0, 1 / 3.0f, 1 / 3.0f, 1 / 3.0f};
  for (size_t i = 0; i < uniform.size(); ++i) EXPECT_FLOAT_EQ(att[i], uniform[i]) << i;
}
