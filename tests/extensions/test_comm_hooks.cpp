// test_comm_hooks.cpp - the comm-hook interface and every built-in hook: an explicit AllreduceHook equals the
// default bitwise; (bf16 on CPU: tests/ddp/test_bf16_allreduce.cpp); one hook object cannot serve two reducers;
// PowerSGD before start_iter is a plain all-reduce (bitwise), at full rank equals it up to rounding, at rank 1
// sends fewer bytes, keeps all ranks identical and its error feedback accounts exactly for what it dropped;
// Gram-Schmidt gives orthonormal columns; options that cannot work are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/powersgd_hook.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

using HookFactory = std::function<std::shared_ptr<CommHook>()>;

struct HookRun {
  std::vector<std::vector<double>> params;  // rank 0
  bool ranks_identical = true;
  int64_t bytes = 0;  // rank 0's hook
};

// The float64 MLP under DDP with one hook per rank, SGD momentum, `steps` steps; two buckets (small cap).
HookRun train_with(int world, const HookFactory& hook, int steps) {
  HookRun out;
  std::vector<std::vector<std::vector<double>>> finals(world);
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(31);
    auto model = std::make_shared<models::MLP>(models::MLPConfig{12, {16, 8}, 5, DType::F64});
    DDPOptions o;
    o.first_bucket_mb = o.bucket_cap_mb = 0.001;  // 1 KiB: several buckets
    if (hook) o.comm_hook = hook();
    DistributedDataParallel ddp(model, borrow(pg), o);
    optim::SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
    const int64_t rows = 3;
    for (int s = 0; s < steps; ++s) {
      Tensor x = Tensor::randn({rows * world, 12}, 900 + s, DType::F64).slice0(rank * rows, (rank + 1) * rows);
      std::vector<int64_t> y(rows);
      for (int64_t i = 0; i < rows; ++i) y[i] = (i + s + rank) % 5;
      opt.zero_grad();
      autograd::backward(ops::cross_entropy(ddp.forward(x), Tensor::from_data(y, {rows})));
      opt.step();
    }
    finals[rank] = snapshot_params(*model);
    if (rank == 0) out.bytes = ddp.reducer().comm_hook().bytes_communicated();
  });
  out.params = finals[0];
  for (int r = 1; r < world; ++r) out.ranks_identical = out.ranks_identical && finals[r] == finals[0];
  return out;
}

HookFactory powersgd(int rank, int64_t start, double min_rate = 2) {
  return [=] {
    PowerSGDOptions o;
    o.matrix_approximation_rank = rank;
    o.start_iter = start;
    o.min_compression_rate = min_rate;
    return std::make_shared<PowerSGDHook>(o);
  };
}

}  // namespace

TEST(CommHooks, ExplicitAllreduceHookEqualsTheDefaultBitwise) {
  HookRun def = train_with(2, nullptr, 4);
  HookRun expl = train_with(2, [] { return std::make_shared<AllreduceHook>(); }, 4);
  EXPECT_TRUE(expl.params == def.params);
  EXPECT_TRUE(expl.ranks_identical);
  EXPECT_GT(expl.bytes, 0);
}

TEST(CommHooks, OneHookCannotServeTwoReducers) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    auto model = std::make_shared<models::MLP>(models::MLPConfig{4, {4}, 2, DType::F64});
    DDPOptions o;
    o.comm_hook = std::make_shared<AllreduceHook>();
    DistributedDataParallel first(model, borrow(pg), o);
    try {
      DistributedDataParallel second(model, borrow(pg), o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already used by another DDP reducer"), std::string::npos) << e.what();
    }
  });
}

TEST(CommHooks, MakeCommHookNamesTheChoices) {
  EXPECT_STREQ(make_comm_hook("allreduce")->name(), "allreduce");
  EXPECT_STREQ(make_comm_hook("bf16")->name(), "bf16");
  EXPECT_STREQ(make_comm_hook("powersgd", 2, 5)->name(), "powersgd");
  EXPECT_THROW(make_comm_hook("fp8"), Error);
}

TEST(PowerSGD, BeforeStartIterItIsAPlainAllreduceBitwise) {
  HookRun plain = train_with(2, nullptr, 4);
  HookRun psgd = train_with(2, powersgd(1, 100), 4);
  EXPECT_TRUE(psgd.params == plain.params);
  EXPECT_EQ(psgd.bytes, plain.bytes);
}

TEST(PowerSGD, FullRankApproximationEqualsPlainAllreduce) {
  // Rank >= min(n, m) for every matrix: P Q^T reproduces the averaged gradient (up to rounding).
  for (int world : {2, 3}) {
    HookRun plain = train_with(world, nullptr, 5);
    HookRun psgd = train_with(world, powersgd(64, 2, 0.0), 5);
    EXPECT_TRUE(psgd.ranks_identical);
    EXPECT_LT(max_relative_difference(psgd.params, plain.params), 1e-10) << "world " << world;
  }
}

TEST(PowerSGD, RankOneSendsFewerBytesAndKeepsRanksIdentical) {
  HookRun plain = train_with(2, nullptr, 6);
  HookRun psgd = train_with(2, powersgd(1, 2, 1.0), 6);
  EXPECT_TRUE(psgd.ranks_identical) << "ranks diverged: Q must start identical (same seed) everywhere";
  EXPECT_LT(psgd.bytes, plain.bytes);
  EXPECT_GT(max_relative_difference(psgd.params, plain.params), 1e-6) << "rank 1 should approximate";
}

TEST(PowerSGD, ErrorFeedbackKeepsExactlyWhatTheApproximationDropped) {
  // One bucket holding a 6x5 gradient and a bias; two ranks; iterations 0-1 plain, iteration 2 compressed.
  const int world = 2;
  std::vector<std::vector<double>> inputs(world), results(world), errors(world);
  std::vector<int64_t> sent(world), plain_elems(world);
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    PowerSGDOptions o;
    o.start_iter = 2;
    o.matrix_approximation_rank = 1;
    PowerSGDHook hook(o);
    Tensor buffer = Tensor::zeros({35}, DType::F64);
    GradBucket b;
    b.index = 0;
    b.is_last = true;
    b.buffer = buffer;
    b.gradients = {buffer.slice0(0, 30).view({6, 5}), buffer.slice0(30, 35)};
    for (int it = 0; it < 3; ++it) {
      buffer.copy_from(Tensor::randn({35}, 40 + 10 * it + rank, DType::F64));
      if (it == 2) inputs[rank] = buffer.to_double_vector();
      hook.run(pg, b)->wait();
    }
    results[rank] = buffer.to_double_vector();
    errors[rank] = hook.error_of(0).to_double_vector();
    sent[rank] = hook.last_sent_elements();
    plain_elems[rank] = hook.last_plain_elements();
  });
  EXPECT_EQ(results[0], results[1]);
  // Sum over ranks of (input + error before, here 0) = approximation + sum of errors, element by element.
  for (size_t j = 0; j < 35; ++j) {
    const double total_in = inputs[0][j] + inputs[1][j];
    EXPECT_NEAR(results[0][j] + errors[0][j] + errors[1][j], total_in, 1e-12) << j;
  }
  // The bias is averaged exactly and keeps no error; the matrix is a rank-1 approximation.
  for (size_t j = 30; j < 35; ++j) {
    EXPECT_NEAR(results[0][j], inputs[0][j] + inputs[1][j], 1e-12);
    EXPECT_EQ(errors[0][j], 0.0);
  }
  for (int i = 1; i < 6; ++i)  // every 2x2 minor of a rank-1 matrix vanishes
    EXPECT_NEAR(results[0][0] * results[0][i * 5 + 1] - results[0][1] * results[0][i * 5], 0.0, 1e-12);
  // Sent: the bias (5) + P (6x1) + Q (5x1) instead of 35.
  EXPECT_EQ(sent[0], 5 + 6 + 5);
  EXPECT_EQ(plain_elems[0], 35);
}

TEST(PowerSGD, GramSchmidtGivesOrthonormalColumns) {
  Tensor p = Tensor::randn({7, 3}, 5, DType::F64);
  orthogonalize_columns(p, 0.0);
  auto v = p.to_double_vector();
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      double dot = 0;
      for (int i = 0; i < 7; ++i) dot += v[i * 3 + a] * v[i * 3 + b];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-12);
    }
}

TEST(PowerSGD, StateBeforeTheBucketRebuildIsRefused) {
  PowerSGDOptions o;
  o.start_iter = 1;
  try {
    PowerSGDHook h(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use start_iter >= 2"), std::string::npos) << e.what();
  }
  o.use_error_feedback = o.warm_start = false;
  EXPECT_NO_THROW(PowerSGDHook{o});
  o.matrix_approximation_rank = 0;
  EXPECT_THROW(PowerSGDHook{o}, Error);
}
TEST(PowerSGD, GramSchmidtZeroesOrRefillsADependentColumn) {
  // Column 2 = 2 * column 0: rounding noise after the projection must not become a new direction.
  Tensor p = Tensor::from_vector({1, 5, 2, 2, -1, 4, 3, 2, 6, 0, 7, 0}, {4, 3}, DType::F64);
  orthogonalize_columns(p, 0.0);
  auto v = p.to_double_vector();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(v[i * 3 + 2], 0.0);
  // With a refill seed (for Q) it becomes a unit vector orthogonal to the other two.
  Tensor q = Tensor::from_vector({1, 5, 2, 2, -1, 4, 3, 2, 6, 0, 7, 0}, {4, 3}, DType::F64);
  orthogonalize_columns(q, 0.0, 99);
  auto w = q.to_double_vector();
  for (int a = 0; a < 3; ++a) {
    double dot = 0;
    for (int i = 0; i < 4; ++i) dot += w[i * 3 + a] * w[i * 3 + 2];
    EXPECT_NEAR(dot, a == 2 ? 1.0 : 0.0, 1e-12);
  }
}
