// test_bf16_allreduce.cpp - the gradient all-reduce in bfloat16 (DDPOptions::comm_hook = BF16CompressHook,
// bench_e2e --allreduce-dtype bf16), on the CPU through Gloo: the averaged gradients are bf16 values, close
// to the float32 all-reduce's (within 3% of each parameter's largest gradient), and not equal to them (the
// buckets really travelled as bf16); ranks agree bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"

using namespace ddp;

namespace {
std::vector<std::vector<double>> grads_after_one_step(bool bf16, int rank, dist::ProcessGroup& pg) {
  nn::manual_seed(9);
  auto model = std::make_shared<models::MLP>(models::MLPConfig{16, {32}, 4, DType::F32});
  DDPOptions o;
  if (bf16) o.comm_hook = std::make_shared<BF16CompressHook>();  // else the default all-reduce
  o.bucket_cap_mb = o.first_bucket_mb = 0.001;  // several buckets
  DistributedDataParallel ddp(
      model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg), o);
  Tensor x = Tensor::randn({8, 16}, 100 + rank);
  autograd::backward(
      ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, {8})));
  std::vector<std::vector<double>> g;
  for (auto& p : model->named_parameters()) g.push_back(p.tensor.grad().to_double_vector());
  return g;
}
}  // namespace

TEST(Bf16Allreduce, GradientsAreBf16ValuesCloseToFloat32OnGloo) {
  std::vector<std::vector<std::vector<double>>> f32(2), bf16(2);
  dist::run_threads(2, [&](int r, dist::ProcessGroup& pg) {
    f32[r] = grads_after_one_step(false, r, pg);
    bf16[r] = grads_after_one_step(true, r, pg);
  });
  EXPECT_TRUE(bf16[0] == bf16[1]) << "ranks disagree";
  bool any_different = false;
  for (size_t i = 0; i < f32[0].size(); ++i) {
    // Each rank's gradient and the sum are rounded to bf16 (relative 2^-9 each): the error is relative to the
    // size of the terms, so the bound scales with the parameter's largest gradient, not each element's.
    double scale = 0;
    for (double v : f32[0][i]) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < f32[0][i].size(); ++j) {
      const double a = bf16[0][i][j], b = f32[0][i][j];
      const float fa = static_cast<float>(a);
      EXPECT_EQ(BFloat16::from_float(fa).to_float(), fa)
          << "param " << i << " elem " << j << " not a bf16 value";
      EXPECT_NEAR(a, b, 3e-2 * scale) << "param " << i << " elem " << j;
      any_different |= a != b;
    }
  }
  EXPECT_TRUE(any_different) << "the bf16 hook changed nothing";
}
