// test_batchnorm_targets.cpp - the vectorized batch norm kernels (statistics with running-stat update,
// normalization, backward in training and evaluation mode) on every instruction set this machine supports,
// float32 against float64 references computed from the same float inputs and float64 to ~1e-12; and bitwise
// identical for thread budgets 1 and 2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/batchnorm.h"
#include "kernels/cpu/parallel.h"
#include "tests/ops_simd/simd_test_util.h"

using namespace ddp;
using namespace ddp::testing;
namespace kc = ddp::kernels::cpu;

namespace {
struct Ref {
  std::vector<double> mean, invstd, rm, rv, y, dx, dw, db;
};
// float64 batch norm of x (N, C, S) from its values as given (already rounded to the tested type).
Ref reference(const std::vector<double>& x, const std::vector<double>& dy, const std::vector<double>& w,
              const std::vector<double>& b, const kc::BatchNormGeometry& g, bool training) {
  const int64_t N = g.batch, C = g.channels, S = g.spatial;
  const double cnt = static_cast<double>(g.count());
  Ref r;
  r.mean.assign(C, 0), r.invstd.assign(C, 0), r.rm.assign(C, 0), r.rv.assign(C, 1);
  r.y.assign(x.size(), 0), r.dx.assign(x.size(), 0), r.dw.assign(C, 0), r.db.assign(C, 0);
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) m += x[(n * C + c) * S + i];
    m /= cnt;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) v += (x[(n * C + c) * S + i] - m) * (x[(n * C + c) * S + i] - m);
    const double is = 1 / std::sqrt(v / cnt + 1e-5);
    r.mean[c] = m, r.invstd[c] = is;
    r.rm[c] = 0.9 * 0.0 + 0.1 * m, r.rv[c] = 0.9 * 1.0 + 0.1 * v / (cnt - 1);
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t k = (n * C + c) * S + i;
        const double xh = (x[k] - m) * is;
        r.y[k] = xh * w[c] + b[c];
        sdy += dy[k], sdyx += dy[k] * xh;
      }
    r.db[c] = sdy, r.dw[c] = sdyx;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t k = (n * C + c) * S + i;
        const double xh = (x[k] - m) * is;
        r.dx[k] = training ? w[c] * is * (dy[k] - sdy / cnt - xh * sdyx / cnt) : w[c] * is * dy[k];
      }
  }
  return r;
}

template <class T>
void check(const kc::BatchNormGeometry& g, double atol, double rtol) {
  const int64_t n = g.batch * g.channels * g.spatial, C = g.channels;
  const std::vector<T> x = cast_to<T>(spread(n, -2, 6)), dy = cast_to<T>(spread(n, -1, 1)),
                       w = cast_to<T>(spread(C, 0.5, 1.5)), b = cast_to<T>(spread(C, -1, 1));
  auto wide = [](const std::vector<T>& v) { return std::vector<double>(v.begin(), v.end()); };
  const Ref r = reference(wide(x), wide(dy), wide(w), wide(b), g, true);
  std::vector<T> mean(C), invstd(C), rm(C, T(0)), rv(C, T(1)), y(n), dx(n), dw(C), db(C);
  kc::batch_norm_stats(x.data(), g, 1e-5, 0.1, mean.data(), invstd.data(), rm.data(), rv.data());
  EXPECT_TRUE(close_to(mean, r.mean, atol, rtol));
  EXPECT_TRUE(close_to(invstd, r.invstd, atol, rtol));
  EXPECT_TRUE(close_to(rm, r.rm, atol, rtol));
  EXPECT_TRUE(close_to(rv, r.rv, atol, rtol));
  kc::batch_norm_apply(x.data(), mean.data(), invstd.data(), w.data(), b.data(), y.data(), g);
  EXPECT_TRUE(close_to(y, r.y, atol, rtol));
  kc::batch_norm_backward(dy.data(), x.data(), mean.data(), invstd.data(), w.data(), dx.data(), dw.data(),
                          db.data(), g, true);
  EXPECT_TRUE(close_to(dx, r.dx, atol, rtol));
  EXPECT_TRUE(close_to(dw, r.dw, atol * g.count(), rtol));
  EXPECT_TRUE(close_to(db, r.db, atol * g.count(), rtol));
  // evaluation mode: mean/invstd constants
  const Ref e = reference(wide(x), wide(dy), wide(w), wide(b), g, false);
  kc::batch_norm_backward(dy.data(), x.data(), mean.data(), invstd.data(), w.data(), dx.data(),
                          static_cast<T*>(nullptr), static_cast<T*>(nullptr), g, false);
  EXPECT_TRUE(close_to(dx, e.dx, atol, rtol));
}
}  // namespace

TEST(BatchNormTargets, Float32AndFloat64MatchTheFloat64ReferenceOnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    for (int64_t spatial : {1, 7, 16, 33, 300}) {
      const kc::BatchNormGeometry g{3, 5, spatial};
      SCOPED_TRACE("spatial " + std::to_string(spatial));
      check<float>(g, 2e-5, 2e-5);
      check<double>(g, 1e-12, 1e-12);
    }
  });
}

TEST(IntraOpParallel, BatchNormIsIdenticalForBudgets1And2) {
  const kc::BatchNormGeometry g{16, 8, 32 * 32};
  const int64_t n = g.batch * g.channels * g.spatial, C = g.channels;
  const std::vector<float> x = cast_to<float>(spread(n, -2, 6)), dy = cast_to<float>(spread(n, -1, 1));
  auto run = [&] {
    std::vector<float> out(C * 4 + n * 2);
    float *mean = out.data(), *invstd = mean + C, *dw = invstd + C, *db = dw + C, *y = db + C, *dx = y + n;
    float* none = nullptr;
    kc::batch_norm_stats(x.data(), g, 1e-5, 0.1, mean, invstd, none, none);
    kc::batch_norm_apply<float>(x.data(), mean, invstd, none, none, y, g);
    kc::batch_norm_backward<float>(dy.data(), x.data(), mean, invstd, none, dx, dw, db, g, true);
    return out;
  };
  const int saved = kc::thread_budget();
  kc::set_thread_budget(1);
  const std::vector<float> one = run();
  kc::set_thread_budget(2);
  const std::vector<float> two = run();
  kc::set_thread_budget(saved);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}
