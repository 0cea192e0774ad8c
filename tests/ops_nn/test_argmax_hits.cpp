// test_argmax_hits.cpp - ops::argmax_hits (evaluation's accuracy count on the device) against a plain
// reference, std::max_element per row (the first largest column; rows with a NaN never count): seeded score
// matrices with many ties (scores drawn from a handful of integers), NaNs in some rows and labels outside
// [0, cols), over rows and columns around the CUDA kernel's warp (32) and block (8 warps) sizes, float32 and
// float64; bad inputs refused by name. On a GPU the CUDA kernel gives the same count (exact: integers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "runtime/ops/accuracy.h"
#include "tests/ops_nn/ops_nn_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
struct Case {
  std::vector<double> scores;
  std::vector<int64_t> labels;
  int64_t rows, cols;
};

Case random_case(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Case c{std::vector<double>(rows * cols), std::vector<int64_t>(rows), rows, cols};
  std::uniform_int_distribution<int> level(0, 3), label(-1, static_cast<int>(cols));
  for (double& v : c.scores) v = level(rng);  // few distinct values: ties everywhere
  for (int64_t i = 0; i < rows; ++i) {
    c.labels[i] = label(rng);  // -1 and cols: outside
    if (i % 7 == 3) c.scores[i * cols + (i % cols)] = std::numeric_limits<double>::quiet_NaN();
    if (i % 5 == 1) c.labels[i] = std::max_element(&c.scores[i * cols], &c.scores[i * cols] + cols) -
                                  &c.scores[i * cols];  // a hit unless the row has a NaN
  }
  return c;
}

double reference_hits(const Case& c) {
  double hits = 0;
  for (int64_t i = 0; i < c.rows; ++i) {
    const double* row = &c.scores[i * c.cols];
    if (std::any_of(row, row + c.cols, [](double v) { return std::isnan(v); })) continue;
    if (std::max_element(row, row + c.cols) - row == c.labels[i]) hits += 1;
  }
  return hits;
}

Tensor scores_of(const Case& c, DType dtype, Device device) {
  return Tensor::from_data<double>(c.scores, {c.rows, c.cols}).to(dtype).to(device);
}
Tensor labels_of(const Case& c, Device device) { return Tensor::from_data<int64_t>(c.labels, {c.rows}).to(device); }

const int64_t kRows[] = {0, 1, 2, 7, 8, 9, 31, 32, 33, 97, 257};
const int64_t kCols[] = {1, 2, 3, 31, 32, 33, 64, 65, 101};
}  // namespace

TEST(ArgmaxHits, MatchesTheFirstLargestColumnReference) {
  uint64_t seed = 1;
  for (DType dtype : {DType::F32, DType::F64})
    for (int64_t rows : kRows)
      for (int64_t cols : kCols) {
        const Case c = random_case(rows, cols, seed++);
        const Tensor hits = ops::argmax_hits(scores_of(c, dtype, Device::cpu()), labels_of(c, Device::cpu()));
        ASSERT_EQ(hits.dim(), 0);
        ASSERT_EQ(hits.dtype(), DType::F64);
        ASSERT_EQ(hits.item(), reference_hits(c)) << rows << " x " << cols << " " << dtype_name(dtype);
      }
}

TEST(ArgmaxHits, BadInputsAreRefusedByName) {
  const Tensor s = Tensor::zeros({4, 3}), l = Tensor::zeros({4}, DType::I64);
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([&] { ops::argmax_hits(Tensor::zeros({4}), l); }).find("(rows, classes)"), std::string::npos);
  EXPECT_NE(message([&] { ops::argmax_hits(s, Tensor::zeros({3}, DType::I64)); }).find("labels must be (rows)"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::argmax_hits(s, Tensor::zeros({4}, DType::I32)); }).find("int64"),
            std::string::npos);
}

TEST(ArgmaxHits, CudaCountsWhatTheCpuCounts) {
  DDP_SKIP_WITHOUT_GPU();
  uint64_t seed = 1000;
  for (DType dtype : {DType::F32, DType::F64})
    for (int64_t rows : kRows)
      for (int64_t cols : kCols) {
        const Case c = random_case(rows, cols, seed++);
        const Tensor hits =
            ops::argmax_hits(scores_of(c, dtype, Device::cuda(0)), labels_of(c, Device::cuda(0)));
        ASSERT_EQ(hits.device(), Device::cuda(0));
        ASSERT_EQ(hits.item(), reference_hits(c)) << rows << " x " << cols << " " << dtype_name(dtype);
      }
  // Large: many blocks, a count far above one block's.
  const Case big = random_case(100000, 10, 7);
  EXPECT_EQ(ops::argmax_hits(scores_of(big, DType::F32, Device::cuda(0)), labels_of(big, Device::cuda(0))).item(),
            reference_hits(big));
}
