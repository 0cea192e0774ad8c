// simd_test_util.h - helpers for the per-instruction-set tests: run a check once for every Highway target
// this machine supports (forcing the dispatcher onto it), and compare float32 results to a float64 reference.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/cpu/simd_target.h"

namespace ddp::testing {

// Calls body(target name) with the dispatcher forced to each supported target in turn, then restores it.
inline void for_each_simd_target(const std::function<void(const std::string&)>& body) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t t : targets) {
    hwy::SetSupportedTargetsForTest(t);
    ASSERT_EQ(kernels::cpu::simd_target(), t) << "dispatcher did not switch to " << hwy::TargetName(t);
    SCOPED_TRACE(std::string("target ") + hwy::TargetName(t));
    body(hwy::TargetName(t));
  }
  hwy::SetSupportedTargetsForTest(0);
}

// |actual - expected| <= atol + rtol |expected| element-wise; infinities and NaN must match exactly.
template <class T>
::testing::AssertionResult close_to(const std::vector<T>& actual, const std::vector<double>& expected,
                                    double atol, double rtol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = static_cast<double>(actual[i]), e = expected[i];
    if (std::isnan(e) || std::isnan(a)) {
      if (std::isnan(e) && std::isnan(a)) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs " << e;
    }
    if (std::isinf(e) || std::isinf(a)) {
      if (a == e) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs " << e;
    }
    if (std::fabs(a - e) > atol + rtol * std::fabs(e))
      return ::testing::AssertionFailure() << "element " << i << " of " << actual.size() << ": " << a
                                           << " vs reference " << e << " (error " << std::fabs(a - e) << ")";
  }
  return ::testing::AssertionSuccess();
}

// n deterministic values spread over [lo, hi] in a scrambled order (so vector lanes see mixed magnitudes).
inline std::vector<double> spread(int64_t n, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = (i * 7919) % n;
    v[static_cast<size_t>(i)] =
        n == 1 ? lo : lo + (hi - lo) * static_cast<double>(j) / static_cast<double>(n - 1);
  }
  return v;
}

template <class T>
std::vector<T> cast_to(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Lengths that exercise whole vectors and every tail length of the widest target (16 floats).
inline std::vector<int64_t> test_lengths() { return {1, 3, 15, 16, 17, 31, 33, 1000}; }

}  // namespace ddp::testing
