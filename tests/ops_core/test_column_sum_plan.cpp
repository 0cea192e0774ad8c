// test_column_sum_plan.cpp - the plan the CUDA column sums use (kernels/cuda/column_sum_plan.h: bias
// gradients in reduce.cu, layer norm's dweight/dbias) and their summation order, run on the host with the
// same per-thread function the kernels call: every row of every column is summed exactly once (integer data,
// so any row missed or added twice shows as an exact difference), chunks are never empty, there are enough
// blocks for every SM where the rows allow it, and one chunk is the single pass it replaced.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/column_sum_plan.h"

using namespace ddp::kernels::cuda;

namespace {
// What the kernels compute for slice o: per chunk, the 8 lanes' sums added in lane order; then the chunks in
// chunk order.
std::vector<double> emulate(const std::vector<double>& x, int64_t outer, int64_t r, int64_t inner,
                            const ColumnSumPlan& p) {
  std::vector<double> out(static_cast<size_t>(outer * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double total = 0;
      for (int64_t c = 0; c < p.chunks; ++c) {
        const int64_t begin = c * p.rows_per_chunk, end = std::min(r, begin + p.rows_per_chunk);
        double s = 0;
        for (int64_t lane = 0; lane < kRowLanesPerBlock; ++lane)
          s += column_lane_sum<double>(x.data() + o * r * inner, inner, j, begin, end, lane,
                                       kRowLanesPerBlock);
        total += s;
      }
      out[static_cast<size_t>(o * inner + j)] = total;
    }
  return out;
}
}  // namespace

TEST(ColumnSumPlan, EveryRowOnceNoEmptyChunkAndEnoughBlocks) {
  int cases = 0;
  for (int sms : {1, 108, 132})
    for (int64_t outer : {1, 2, 7})
      for (int64_t r : {0, 1, 7, 63, 64, 65, 127, 128, 129, 4099})
        for (int64_t inner : {1, 31, 32, 33, 97, 768}) {
          SCOPED_TRACE("sms " + std::to_string(sms) + " outer " + std::to_string(outer) + " r " +
                       std::to_string(r) + " inner " + std::to_string(inner));
          const ColumnSumPlan p = plan_column_sum(outer, r, inner, sms);
          EXPECT_EQ(p.col_tiles, (inner + 31) / 32);
          ASSERT_GE(p.chunks, 1);
          EXPECT_LE(p.chunks, kMaxChunks);
          if (r > 0) {
            EXPECT_GE(p.chunks * p.rows_per_chunk, r) << "rows left out";
            EXPECT_LT((p.chunks - 1) * p.rows_per_chunk, r) << "an empty chunk";
          }
          if (p.chunks > 1) {
            EXPECT_GE(r / p.chunks, kMinRowsPerChunk / 2) << "chunks too short for their scratch row";
            EXPECT_LT(p.col_tiles * outer, 4 * sms) << "split although the tiles fill the GPU";
          }
          const bool rows_allow =
              r / kMinRowsPerChunk >= (4 * sms + p.col_tiles * outer - 1) / (p.col_tiles * outer);
          if (rows_allow) EXPECT_GE(p.col_tiles * outer * p.chunks, 4 * sms) << "SMs left idle";
          // Integer data: every sum is exact, so a row missed or summed twice is an exact difference.
          std::vector<double> x(static_cast<size_t>(outer * r * inner));
          for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>((i * 7919) % 1000) - 500;
          std::vector<double> ref(static_cast<size_t>(outer * inner), 0.0);
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t k = 0; k < r; ++k)
              for (int64_t j = 0; j < inner; ++j) ref[o * inner + j] += x[(o * r + k) * inner + j];
          EXPECT_EQ(emulate(x, outer, r, inner, p), ref);
          ++cases;
        }
  EXPECT_EQ(cases, 3 * 3 * 10 * 6);
}

TEST(ColumnSumPlan, Gpt2SmallBiasGradientFillsAnH200) {
  // (B * T, C) = (8192, 768): 24 tiles of 32 columns -> 22 chunks of 373 rows, 528 blocks for 132 SMs.
  const ColumnSumPlan p = plan_column_sum(1, 8192, 768, 132);
  EXPECT_EQ(p.col_tiles, 24);
  EXPECT_EQ(p.chunks, 22);
  EXPECT_EQ(p.rows_per_chunk, 373);
  // Wide enough already: (8192, 50304) is 1572 tiles, one pass.
  EXPECT_EQ(plan_column_sum(1, 8192, 50304, 132).chunks, 1);
}

// bf16 inputs (the fused MLP's bias gradient sums the bf16 d_pre, kernels/cuda/mlp_bf16.cu): each element
// widens exactly (its bits are a float32's top half), so a lane's sum over bf16 values equals its sum over
// the same values as float32, for every lane and range, signs, zeros and powers of two included.
TEST(ColumnSumPlan, Bf16InputsWidenExactly) {
  const int64_t r = 37, inner = 5;
  std::vector<ddp::BFloat16> xb(static_cast<size_t>(r * inner));
  std::vector<float> xf(xb.size());
  for (size_t i = 0; i < xb.size(); ++i) {
    const float v =
        (i % 3 == 0) ? 0.f : static_cast<float>((static_cast<int64_t>(i * 2654435761u % 2001) - 1000)) / 64.f;
    xb[i] = ddp::BFloat16::from_float(v);
    xf[i] = xb[i].to_float();
  }
  EXPECT_EQ(widen_to<double>(ddp::BFloat16::from_float(-0.375f)), -0.375);
  EXPECT_EQ(widen_to<double>(ddp::BFloat16::from_float(65536.f)), 65536.0);
  for (int64_t j = 0; j < inner; ++j)
    for (int64_t lane = 0; lane < kRowLanesPerBlock; ++lane)
      for (int64_t begin : {int64_t{0}, int64_t{3}})
        EXPECT_EQ((column_lane_sum<double>(xb.data(), inner, j, begin, r, lane, kRowLanesPerBlock)),
                  (column_lane_sum<double>(xf.data(), inner, j, begin, r, lane, kRowLanesPerBlock)))
            << "column " << j << " lane " << lane << " from row " << begin;
}
