// test_convert_reduce_targets.cpp - the vectorized dtype conversions, column sums (bias gradients, the
// broadcast backward) and embedding scatter-add on every instruction set this machine supports: conversions
// bit-identical to the scalar formulas (NaN, infinities, rounding ties, subnormals), sums within float32
// tolerance of float64 references, every tail length; and bitwise identical for thread budgets 1 and 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"
#include "tests/ops_simd/simd_test_util.h"

using namespace ddp;
using namespace ddp::testing;
namespace kc = ddp::kernels::cpu;

namespace {
std::vector<float> awkward_floats(int64_t n) {
  std::vector<float> v = cast_to<float>(spread(n, -1e5, 1e5));
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            1e-40f /* subnormal */,
                            1.00390625f /* bf16 tie, even below */,
                            1.01171875f /* bf16 tie, odd below */,
                            3.4e38f,
                            -1.17549435e-38f};
  for (size_t i = 0; i < v.size(); i += 3) v[i] = specials[(i / 3) % 10];
  return v;
}
}  // namespace

TEST(ConvertTargets, Float32Float64Bfloat16MatchTheScalarFormulasBitForBit) {
  for_each_simd_target([](const std::string&) {
    for (int64_t n : test_lengths()) {
      const std::vector<float> x = awkward_floats(n);
      std::vector<double> d(n), dref(n);
      ASSERT_TRUE(kc::convert(x.data(), DType::F32, d.data(), DType::F64, n));
      for (int64_t i = 0; i < n; ++i) dref[i] = static_cast<double>(x[i]);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(std::memcmp(&d[i], &dref[i], sizeof(double)), 0)
            << "f32->f64 n " << n << " i " << i << ": " << d[i] << " vs " << dref[i];
      std::vector<double> wide = spread(n, -1e39, 1e39);  // some beyond float range: inf
      wide[0] = 1.0 + 1e-12;
      std::vector<float> f(n), fref(n);
      ASSERT_TRUE(kc::convert(wide.data(), DType::F64, f.data(), DType::F32, n));
      for (int64_t i = 0; i < n; ++i) fref[i] = static_cast<float>(wide[i]);
      EXPECT_EQ(std::memcmp(f.data(), fref.data(), n * sizeof(float)), 0) << "f64->f32 n " << n;
      std::vector<BFloat16> b(n), bref(n);
      ASSERT_TRUE(kc::convert(x.data(), DType::F32, b.data(), DType::BF16, n));
      for (int64_t i = 0; i < n; ++i) bref[i] = BFloat16::from_float(x[i]);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(b[i].bits, bref[i].bits) << "f32->bf16 n " << n << " x " << x[i];
      std::vector<float> back(n);
      ASSERT_TRUE(kc::convert(b.data(), DType::BF16, back.data(), DType::F32, n));
      for (int64_t i = 0; i < n; ++i) {
        const float e = bref[i].to_float();
        ASSERT_EQ(std::memcmp(&back[i], &e, sizeof(float)), 0) << "bf16->f32 n " << n;
      }
    }
    int32_t a = 0, b = 0;
    EXPECT_FALSE(kc::convert(&a, DType::I32, &b, DType::I32, 1)) << "other pairs are left to the caller";
  });
}

TEST(ColumnSumTargets, SumMiddleAndSumToShapeMatchFloat64OnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    for (int64_t rows : {1, 3, 17, 1000}) {
      for (int64_t cols : test_lengths()) {
        const std::vector<double> x64 = spread(rows * cols, -3, 5);
        const std::vector<float> x = cast_to<float>(x64);
        std::vector<double> ref(cols, 0.0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) ref[c] += static_cast<double>(x[r * cols + c]);
        std::vector<float> out(cols), out2(cols);
        kc::sum_middle(x.data(), 1, rows, cols, out.data(), 1.0);
        // float32 partial sums over blocks of 16 rows: relative error ~16 eps of the magnitudes summed
        EXPECT_TRUE(close_to(out, ref, 1e-5 * rows, 1e-5)) << "rows " << rows << " cols " << cols;
        kc::sum_to_shape(x.data(), {rows, cols}, out2.data(), {cols});
        EXPECT_TRUE(close_to(out2, ref, 1e-5 * rows, 1e-5))
            << "sum_to_shape rows " << rows << " cols " << cols;
        std::vector<double> out64(cols), ref64(cols, 0.0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) ref64[c] += x64[r * cols + c];
        kc::sum_middle(x64.data(), 1, rows, cols, out64.data(), 1.0);
        EXPECT_TRUE(close_to(out64, ref64, 1e-12, 1e-13)) << "float64 rows " << rows << " cols " << cols;
      }
    }
    // Taller than 64 super-blocks of 256 rows: the super-blocks grow to 512 rows.
    const int64_t rows = 20000, cols = 5;
    const std::vector<float> x = cast_to<float>(spread(rows * cols, -3, 5));
    std::vector<double> ref(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) ref[c] += static_cast<double>(x[r * cols + c]);
    std::vector<float> out(cols);
    kc::sum_middle(x.data(), 1, rows, cols, out.data(), 1.0);
    EXPECT_TRUE(close_to(out, ref, 1e-3, 1e-5)) << "rows " << rows;
  });
}

namespace {
// The column sums' documented order, written out as scalar loops (kernels/cpu/reduce.cpp): per column, the
// rows in blocks of 16, each block summed in the input type from 0 in groups of four ((r0 + r1) + (r2 + r3),
// the groups in row order, leftover rows one by one), each block's sum added in double; the blocks in
// super-blocks of 256 rows (doubled until there are at most 64), each super-block's double partial from 0,
// the partials added in order - or, with one super-block or more than 2^20 partial values, one double
// accumulator over every block.
template <class In>
std::vector<double> column_sums_in_documented_order(const std::vector<In>& x, int64_t rows, int64_t cols) {
  int64_t super = 256;
  while ((rows + super - 1) / super > 64) super *= 2;
  const int64_t supers = (rows + super - 1) / super;
  const bool one_accumulator = supers == 1 || supers * cols > (int64_t(1) << 20);
  if (one_accumulator) super = rows;
  std::vector<double> out(cols, 0.0);
  for (int64_t c = 0; c < cols; ++c) {
    double total = 0.0;
    for (int64_t s0 = 0; s0 < rows; s0 += super) {
      double partial = 0.0;
      const int64_t s1 = std::min(rows, s0 + super);
      for (int64_t b0 = s0; b0 < s1; b0 += 16) {
        const int64_t b1 = std::min(s1, b0 + 16);
        In block = In(0);
        int64_t k = b0;
        auto at = [&](int64_t row) { return x[row * cols + c]; };
        for (; k + 4 <= b1; k += 4) block += (at(k) + at(k + 1)) + (at(k + 2) + at(k + 3));
        for (; k < b1; ++k) block += at(k);
        partial += static_cast<double>(block);
      }
      total = s0 == 0 ? partial : total + partial;
    }
    out[c] = total;
  }
  return out;
}
}  // namespace

// The column sums read rows eight at a time and whole rows up to 1024 wide (reduce.cpp); the additions stay
// those of the documented order above, bit for bit, on every target, at every boundary of the groups (4, 8),
// blocks (16), super-blocks (256, and their growth past 64) and column tiles (1024), in float32 and float64.
TEST(ColumnSumTargets, EveryTargetAddsInTheDocumentedOrderBitwise) {
  for_each_simd_target([](const std::string& target) {
    for (int64_t rows : {1, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 23, 24, 31, 255, 256, 257, 1000, 16385}) {
      for (int64_t cols :
           {2, 3, 15, 17, 1023, 1024, 1025, 2053}) {  // one column is a row sum (sum_contiguous)
        if (rows * cols > 4'000'000) continue;
        std::vector<double> x64(rows * cols);
        uint64_t state = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(rows * 131 + cols);
        for (double& v : x64) {  // magnitudes 1e-3 .. 1e3 and both signs: every rounding shows
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          const double u = static_cast<double>(state >> 11) / 9007199254740992.0;
          v = (u - 0.5) * std::pow(10.0, static_cast<double>((state >> 3) % 7) - 3.0);
        }
        const std::vector<float> x = cast_to<float>(x64);
        std::vector<float> out(cols);
        kc::sum_middle(x.data(), 1, rows, cols, out.data(), 1.0);
        const std::vector<double> ref = column_sums_in_documented_order(x, rows, cols);
        for (int64_t c = 0; c < cols; ++c) {
          const float want = static_cast<float>(ref[c]);
          ASSERT_EQ(std::memcmp(&out[c], &want, sizeof(float)), 0)
              << target << " float32 rows " << rows << " cols " << cols << " column " << c << ": " << out[c]
              << " vs " << want;
        }
        std::vector<double> out64(cols);
        kc::sum_middle(x64.data(), 1, rows, cols, out64.data(), 1.0);
        const std::vector<double> ref64 = column_sums_in_documented_order(x64, rows, cols);
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(std::memcmp(&out64[c], &ref64[c], sizeof(double)), 0)
              << target << " float64 rows " << rows << " cols " << cols << " column " << c << ": " << out64[c]
              << " vs " << ref64[c];
      }
    }
  });
}

TEST(EmbeddingTargets, ScatterAddMatchesFloat64WithRepeatedIndicesOnEveryTarget) {
  for_each_simd_target([](const std::string&) {
    for (int64_t cols : test_lengths()) {
      const int64_t n = 50, vocab = 7;
      std::vector<int64_t> idx(n);
      for (int64_t i = 0; i < n; ++i) idx[i] = (i * 3) % 5;  // repeats; rows 5 and 6 never used
      const std::vector<float> dout = cast_to<float>(spread(n * cols, -2, 2));
      std::vector<float> dw(vocab * cols, 99.0f);
      std::vector<double> ref(vocab * cols, 0.0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < cols; ++c) ref[idx[i] * cols + c] += dout[i * cols + c];
      kc::embedding_backward(dout.data(), idx.data(), dw.data(), n, vocab, cols);
      EXPECT_TRUE(close_to(dw, ref, 1e-5, 1e-5)) << "cols " << cols;
    }
  });
}

TEST(IntraOpParallel, ConversionsColumnSumsAndEmbeddingAreIdenticalForBudgets1And2) {
  const int saved = kc::thread_budget();
  auto run = [] {
    std::vector<char> bytes;
    auto keep = [&](const auto& v) {
      const char* p = reinterpret_cast<const char*>(v.data());
      bytes.insert(bytes.end(), p, p + v.size() * sizeof(v[0]));
    };
    const int64_t rows = 1001, cols = 1000, n = rows * cols;
    const std::vector<float> x = cast_to<float>(spread(n, -3, 5));
    std::vector<float> col(cols);
    kc::sum_middle(x.data(), 1, rows, cols, col.data(), 1.0), keep(col);
    kc::sum_middle(x.data(), 1, 200, cols, col.data(), 1.0), keep(col);  // one super-block: split by columns
    kc::sum_middle(x.data(), 1, 20000, 50, col.data(), 1.0), keep(col);  // 40 super-blocks of 512 rows
    // float64: the order of the additions shows in the last bits (float32's block sums add exactly in double)
    const std::vector<double> x64 = spread(n, -3, 5);
    std::vector<double> col64(cols);
    kc::sum_middle(x64.data(), 1, rows, cols, col64.data(), 1.0), keep(col64);
    kc::sum_to_shape(x.data(), {rows, cols}, col.data(), {cols}), keep(col);
    std::vector<double> d(n);
    kc::convert(x.data(), DType::F32, d.data(), DType::F64, n), keep(d);
    std::vector<BFloat16> b(n);
    kc::convert(x.data(), DType::F32, b.data(), DType::BF16, n), keep(b);
    std::vector<int64_t> idx(rows);
    for (int64_t i = 0; i < rows; ++i) idx[i] = (i * 7) % 97;
    std::vector<float> dw(97 * cols);
    kc::embedding_backward(x.data(), idx.data(), dw.data(), rows, 97, cols), keep(dw);
    std::vector<float> out(n);
    kc::embedding_forward(x.data(), idx.data(), out.data(), rows, cols), keep(out);
    return bytes;
  };
  // Default thresholds, then every split forced (the column sums of 1001 rows: four super-blocks of 256 rows
  // split across the threads; of 1000 x 1000 in sum_to_shape's path: the same).
  for (bool forced : {false, true}) {
    SCOPED_TRACE(forced ? "split forced" : "default thresholds");
    kc::set_parallel_split_always(forced);
    kc::set_thread_budget(1);
    const std::vector<char> one = run();
    kc::set_thread_budget(2);
    const std::vector<char> two = run();
    kc::set_thread_budget(3);
    const std::vector<char> three = run();
    ASSERT_EQ(one.size(), two.size());
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size()), 0);
    EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size()), 0);
  }
  kc::set_parallel_split_always(false);
  kc::set_thread_budget(saved);
}
