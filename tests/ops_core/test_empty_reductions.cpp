// test_empty_reductions.cpp - sums and means over nothing: sum over 0 rows or 0 columns is 0, the mean of
// nothing NaN (as PyTorch), their gradients empty; after a large sum on the same thread (the column-sum
// scratch then holds stale partial sums) and on a fresh thread (no scratch yet); float32 and float64; also
// the kernels themselves (every in/out type pair, outputs prefilled with garbage).
#include <gtest/gtest.h>

#include <limits>

#include "kernels/cpu/reduce.h"
#include "runtime/ops/reduce.h"
#include "runtime/tensor/tensor_math.h"
#include "tests/ops_core/empty_case.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// x: (rows, cols) -> reduction `op` with the expected result shape and fill value.
EmptyCase on_matrix(std::string name, ApplyOp op, std::function<Shape(int64_t, int64_t)> out_shape,
                    double fill) {
  return {name,
          [](int64_t r, int64_t c, DType dt) {
            return Inputs{leaf({r, c}, dt, 3)};
          },
          op,
          [out_shape, fill](int64_t r, int64_t c, const Inputs&) {
            const Shape s = out_shape(r, c);
            return Expected{s, filled(shape_numel(s), fill), {{}}};
          }};
}

std::vector<EmptyCase> matrix_reductions() {
  using I = const Inputs&;
  return {
      on_matrix(
          "sum", [](I in) { return ops::sum(in[0]); }, [](int64_t, int64_t) { return Shape{}; }, 0.0),
      on_matrix(
          "sum over all dims listed",
          [](I in) {
            return ops::sum(in[0], {0, 1});
          },
          [](int64_t, int64_t) { return Shape{}; }, 0.0),
      on_matrix(
          "sum dim 0", [](I in) { return ops::sum(in[0], {0}); }, [](int64_t, int64_t c) { return Shape{c}; },
          0.0),
      on_matrix(
          "sum dim 0 keepdim", [](I in) { return ops::sum(in[0], {0}, true); },
          [](int64_t, int64_t c) {
            return Shape{1, c};
          },
          0.0),
      on_matrix(
          "sum dim -1", [](I in) { return ops::sum(in[0], {-1}); },
          [](int64_t r, int64_t) { return Shape{r}; }, 0.0),
      on_matrix(
          "sum dim 1 keepdim", [](I in) { return ops::sum(in[0], {1}, true); },
          [](int64_t r, int64_t) {
            return Shape{r, 1};
          },
          0.0),
      on_matrix(
          "mean", [](I in) { return ops::mean(in[0]); }, [](int64_t, int64_t) { return Shape{}; }, kNaN),
      on_matrix(
          "mean dim 0", [](I in) { return ops::mean(in[0], {0}); },
          [](int64_t, int64_t c) { return Shape{c}; }, kNaN),
      on_matrix(
          "mean dim 1 keepdim", [](I in) { return ops::mean(in[0], {1}, true); },
          [](int64_t r, int64_t) {
            return Shape{r, 1};
          },
          kNaN),
      on_matrix(
          "sum_of_squares", [](I in) { return Tensor::from_vector({sum_of_squares(in[0])}, {}, DType::F64); },
          [](int64_t, int64_t) { return Shape{}; }, 0.0),
  };
}

// 3-D inputs: the empty dimension in the middle of kept ones, and kept between two reduced ones.
std::vector<EmptyCase> cube_reductions() {
  using I = const Inputs&;
  return {
      {"sum dim 1 of (2, rows, cols)",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({2, r, c}, dt, 4)};
       },
       [](I in) { return ops::sum(in[0], {1}); },
       [](int64_t, int64_t c, const Inputs&) {
         return Expected{{2, c}, filled(2 * c, 0.0), {{}}};
       }},
      {"sum dims 0, 2 of (rows, 3, cols)",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, 3, c}, dt, 5)};
       },
       [](I in) {
         return ops::sum(in[0], {0, 2});
       },
       [](int64_t, int64_t, const Inputs&) {
         return Expected{{3}, filled(3, 0.0), {{}}};
       }},
      {"mean dims 0, 2 of (rows, 3, cols)",
       [](int64_t r, int64_t c, DType dt) {
         return Inputs{leaf({r, 3, c}, dt, 5)};
       },
       [](I in) {
         return ops::mean(in[0], {0, 2});
       },
       [](int64_t, int64_t, const Inputs&) {
         return Expected{{3}, filled(3, kNaN), {{}}};
       }},
  };
}
}  // namespace

TEST(EmptyReductions, SumsOverNothingAreZeroAndMeansNaNAfterALargeSumAndOnAFreshThread) {
  for (const EmptyCase& c : matrix_reductions()) check_case(c, no_rows_nor_cols());
  for (const EmptyCase& c : cube_reductions()) check_case(c, no_rows_nor_cols());
}

TEST(EmptyReductions, KernelColumnSumOverZeroRowsWritesZerosForEveryTypePair) {
  auto check = [](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    for (int64_t inner : {1, 2, 7, 16, 17, 511, 512, 513, 4097})
      for (int64_t outer : {1, 3}) {
        {  // dirty the thread's scratch: a tall column sum of the same width
          std::vector<In> big(static_cast<size_t>(300 * inner), In(1));  // 300 rows: two super-blocks
          std::vector<Out> out(static_cast<size_t>(inner));
          kernels::cpu::sum_middle(big.data(), 1, 300, inner, out.data(), 1.0);
        }
        std::vector<Out> out(static_cast<size_t>(outer * inner), Out(12345));
        kernels::cpu::sum_middle(static_cast<const In*>(nullptr), outer, 0, inner, out.data(), 1.0);
        for (Out v : out) ASSERT_EQ(v, Out(0)) << "inner " << inner << " outer " << outer;
        std::vector<Out> mean(static_cast<size_t>(outer * inner), Out(12345));
        kernels::cpu::sum_middle(static_cast<const In*>(nullptr), outer, 0, inner, mean.data(),
                                 std::numeric_limits<double>::infinity());  // scale 1/0: the mean of nothing
        for (Out v : mean) ASSERT_TRUE(std::isnan(v)) << "inner " << inner << " outer " << outer;
      }
  };
  for (int fresh = 0; fresh < 2; ++fresh) {
    auto all = [&] {
      check(float{}, float{});
      check(double{}, double{});
      check(float{}, double{});
      check(double{}, float{});
    };
    if (fresh) {
      std::thread t(all);
      t.join();
    } else {
      all();
    }
  }
}

TEST(EmptyReductions, KernelSumAndExpandOverAnEmptyDimension) {
  for (int64_t kept : {1, 5, 600}) {
    std::vector<double> out(static_cast<size_t>(kept), 7.0);
    kernels::cpu::sum_dims<double>(nullptr, {3, 0, kept}, {true, true, false}, out.data(), 1.0);
    for (double v : out) EXPECT_EQ(v, 0.0) << "kept " << kept;
    std::vector<float> outf(static_cast<size_t>(kept), 7.0f);
    kernels::cpu::sum_dims<float>(nullptr, {0, kept}, {true, false}, outf.data(), 1.0);
    for (float v : outf) EXPECT_EQ(v, 0.0f) << "kept " << kept;
    kernels::cpu::expand_dims<double>(out.data(), {0, kept}, {true, false}, nullptr, 1.0);  // writes nothing
  }
}
