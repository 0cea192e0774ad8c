// test_fixed_point.cpp - the deterministic mode's fixed-point kernels (kernels/cpu/fixed_point.h) against a
// float64 reference over sizes at every block boundary, both dtypes: the mean they give is within the fixed
// point's resolution of the exact mean, integer sums in any order give the same bits, any thread split gives
// the same bits, all-zero blocks stay zero and a NaN or infinity poisons only its block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/fixed_point.h"
#include "kernels/cpu/parallel.h"

using namespace ddp::kernels::cpu;

namespace {

constexpr int64_t kBlock = 16;

// contributions[m] has n elements spread over many magnitudes (one block much smaller than the rest).
template <class T>
std::vector<std::vector<T>> random_contributions(int count, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  std::uniform_int_distribution<int> ex(-20, 4);
  std::vector<std::vector<T>> c(static_cast<size_t>(count), std::vector<T>(static_cast<size_t>(n)));
  for (auto& v : c)
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<T>(std::ldexp(nd(rng), ex(rng)));
  return c;
}

template <class T>
std::vector<T> fixed_point_mean(const std::vector<std::vector<T>>& c, const std::vector<size_t>& order,
                                int64_t n, int headroom) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<int32_t> exps(static_cast<size_t>(blocks), kNoExponent);
  for (size_t m : order) block_exponents(c[m].data(), n, kBlock, exps.data());
  std::vector<int64_t> acc(static_cast<size_t>(n), 0);
  for (size_t m : order) quantize_add(c[m].data(), n, kBlock, exps.data(), headroom, acc.data());
  std::vector<T> out(static_cast<size_t>(n));
  dequantize_mean(acc.data(), n, kBlock, exps.data(), headroom, static_cast<int64_t>(c.size()), out.data());
  return out;
}

template <class T>
void check_sizes() {
  for (int64_t n : {int64_t{0}, int64_t{1}, kBlock - 1, kBlock, kBlock + 1, int64_t{97}, 3 * kBlock + 5,
                    int64_t{1031}}) {
    for (int count : {1, 2, 3, 4, 7}) {
      SCOPED_TRACE("n " + std::to_string(n) + " contributions " + std::to_string(count));
      const auto c = random_contributions<T>(count, n, 1000 * static_cast<uint64_t>(n) + count);
      const int headroom = static_cast<int>(std::bit_width(static_cast<uint64_t>(count)));
      std::vector<size_t> order(static_cast<size_t>(count));
      std::iota(order.begin(), order.end(), 0);
      const std::vector<T> mean = fixed_point_mean(c, order, n, headroom);
      // Any order of the contributions: the same bits.
      std::vector<size_t> reversed(order.rbegin(), order.rend());
      const std::vector<T> mean_rev = fixed_point_mean(c, reversed, n, headroom);
      ASSERT_EQ(0, std::memcmp(mean.data(), mean_rev.data(), mean.size() * sizeof(T)));
      // Against the float64 mean: the error is at most one rounding of T plus the fixed point's resolution
      // (count roundings of 2^-(62 - headroom) of the block's largest magnitude).
      for (int64_t i = 0; i < n; ++i) {
        long double sum = 0;  // 64-bit mantissa: the reference's own rounding is far below the tolerance
        for (auto& v : c) sum += static_cast<long double>(v[static_cast<size_t>(i)]);
        const double exact = static_cast<double>(sum / count);
        double block_max = 0;
        const int64_t lo = i / kBlock * kBlock, hi = std::min(n, lo + kBlock);
        for (auto& v : c)
          for (int64_t k = lo; k < hi; ++k) block_max = std::max(block_max, std::fabs(double(v[size_t(k)])));
        const double tol = 2 * std::fabs(exact) * std::numeric_limits<T>::epsilon() +
                           2.0 * block_max * std::ldexp(1.0, -(kFixedPointBits - headroom - 1));
        ASSERT_LE(std::fabs(static_cast<double>(mean[static_cast<size_t>(i)]) - exact), tol) << "element " << i;
      }
    }
  }
}

}  // namespace

TEST(FixedPoint, MeanMatchesFloat64ReferenceAtEveryBlockBoundaryFloat32) { check_sizes<float>(); }
TEST(FixedPoint, MeanMatchesFloat64ReferenceAtEveryBlockBoundaryFloat64) { check_sizes<double>(); }

// Equal contributions average to themselves exactly (a power-of-two count), and zeros stay zero.
TEST(FixedPoint, EqualContributionsAndZerosAreExact) {
  std::vector<std::vector<float>> c(4, std::vector<float>{1.5f, -3.25e-7f, 0.f, 7.0e3f});
  std::vector<size_t> order{0, 1, 2, 3};
  const auto mean = fixed_point_mean(c, order, 4, 3);
  EXPECT_EQ(mean, c[0]);
  std::vector<std::vector<float>> z(3, std::vector<float>(40, 0.f));
  std::vector<int32_t> exps(3, kNoExponent);
  for (auto& v : z) block_exponents(v.data(), 40, kBlock, exps.data());
  EXPECT_EQ(exps, std::vector<int32_t>(3, kNoExponent));
}

// A NaN or infinity: its block (and only it) comes out NaN.
TEST(FixedPoint, NonFiniteValuesPoisonTheirBlockOnly) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<std::vector<float>> c(2, std::vector<float>(3 * kBlock, 0.5f));
    c[1][static_cast<size_t>(kBlock + 3)] = bad;
    const auto mean = fixed_point_mean(c, {0, 1}, 3 * kBlock, 2);
    for (int64_t i = 0; i < 3 * kBlock; ++i) {
      const bool in_bad_block = i >= kBlock && i < 2 * kBlock;
      EXPECT_EQ(std::isnan(mean[static_cast<size_t>(i)]), in_bad_block) << i;
      if (!in_bad_block) EXPECT_EQ(mean[static_cast<size_t>(i)], 0.5f) << i;
    }
  }
}

// The kernels split over the pool in whole blocks: forced splits at 2 threads give the bits of 1 thread.
TEST(FixedPoint, AnyThreadSplitGivesTheSameBits) {
  const int64_t n = 50 * kBlock + 3;
  const auto c = random_contributions<float>(3, n, 7);
  set_thread_budget(1);
  const auto one = fixed_point_mean(c, {0, 1, 2}, n, 2);
  set_thread_budget(2);
  set_parallel_split_always(true);
  const auto two = fixed_point_mean(c, {2, 0, 1}, n, 2);
  set_parallel_split_always(false);
  set_thread_budget(1);
  ASSERT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
}

// The vector lanes and the scalar tail give the bits of the plain formula: round to nearest even of
// x * 2^shift (ties included), and T(double(acc) * 2^-shift / count).
TEST(FixedPoint, VectorLanesAndTailGiveThePlainFormulasBits) {
  const int64_t n = 3 * kBlock + 7;  // whole vectors, then a tail, in several blocks
  std::vector<float> x(static_cast<size_t>(n));
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd;
  for (auto& v : x) v = static_cast<float>(nd(rng));
  std::vector<int32_t> exps((n + kBlock - 1) / kBlock, kNoExponent);
  block_exponents(x.data(), n, kBlock, exps.data());
  // Put exact ties (k + 0.5 units of the fixed point) into every block, in lanes and tails alike.
  const int headroom = 2;
  for (int64_t i = 0; i < n; i += 5) {
    const int shift = block_shift(exps[size_t(i / kBlock)], headroom);
    x[size_t(i)] = static_cast<float>(std::ldexp(static_cast<double>(2 * (i % 7) + 1) / 2, -shift));
  }
  std::vector<int64_t> acc(static_cast<size_t>(n));
  quantize_add(x.data(), n, kBlock, exps.data(), headroom, acc.data(), /*first=*/true);
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_mean(acc.data(), n, kBlock, exps.data(), headroom, 3, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const int shift = block_shift(exps[size_t(i / kBlock)], headroom);
    const double scaled = std::ldexp(static_cast<double>(x[size_t(i)]), shift);
    ASSERT_EQ(acc[size_t(i)], static_cast<int64_t>(std::nearbyint(scaled))) << i;  // default mode: ties to even
    const float want = static_cast<float>(static_cast<double>(acc[size_t(i)]) * (std::ldexp(1.0, -shift) / 3.0));
    ASSERT_EQ(0, std::memcmp(&out[size_t(i)], &want, sizeof(float))) << i;
  }
}
