// test_sharded_bf16_cast_scope.cpp - the ZeRO optimizers' step() inside an open ops::Bf16WeightCast scope (the
// once-per-step bf16 weight copies would go stale under the step): ShardedOptimizer (ZeRO-2, ZeRO-3) and
// ZeroRedundancyOptimizer (ZeRO-1) raise the named error on every rank of a world of 2, before any collective
// (so no rank waits for a peer that raised), and leave the parameters as they were; the same step after the
// scope closes runs.
#include <gtest/gtest.h>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "runtime/ops/loss.h"
#include "tests/support/collective_checks.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
std::shared_ptr<nn::Module> mlp() {
  nn::manual_seed(5);
  return std::make_shared<models::MLP>(models::MLPConfig{6, {8}, 3, DType::F64});
}
std::unique_ptr<optim::Optimizer> sgd(std::vector<nn::NamedTensor> ps) {
  return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.1});
}
Tensor batch(int rank) { return Tensor::randn({4, 6}, 40 + rank, DType::F64); }
Tensor labels() { return Tensor::from_data<int64_t>({0, 1, 2, 1}, {4}); }
std::vector<double> first_param(nn::Module& m) { return m.parameters().front().to_double_vector(); }

// The step inside a scope: refused by name, the parameters untouched (where the module holds them whole: not
// under ZeRO-3, whose module holds shards between steps); after the scope: it runs.
void expect_refused_then_runs(const std::function<void()>& step, nn::Module& model, const char* who,
                              std::string& error, bool whole_parameters) {
  const std::vector<double> before = whole_parameters ? first_param(model) : std::vector<double>{};
  {
    ops::Bf16WeightCast scope;
    error = ddp::testing::error_of(step);
  }
  EXPECT_NE(error.find(who), std::string::npos) << error;
  EXPECT_NE(error.find("Bf16WeightCast"), std::string::npos) << error;
  if (whole_parameters) EXPECT_EQ(first_param(model), before);
  EXPECT_NO_THROW(step());
  if (whole_parameters) EXPECT_NE(first_param(model), before);
}
}  // namespace

TEST(ShardedBf16CastScope, ZeroOptimizersRefuseAStepInsideAScopeOnEveryRank) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(stage));
    std::vector<std::string> errors(2);
    dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
      auto model = mlp();
      if (stage == 1) {
        DistributedDataParallel ddp(model, borrow(pg), {});
        optim::ZeroRedundancyOptimizer zero(model->named_parameters(), borrow(pg), sgd);
        autograd::backward(ops::cross_entropy(ddp.forward(batch(rank)), labels()));
        expect_refused_then_runs([&] { zero.step(); }, *model, "ZeroRedundancyOptimizer::step", errors[rank], true);
        return;
      }
      ShardOptions o;
      o.stage = stage;
      if (stage == 3) {  // ZeRO-3's gathers go over a second group of the same ranks
        dist::DistEnv env;
        env.rank = rank;
        env.world_size = 2;
        dist::ProcessGroupOptions po;
        po.name = "gather";
        o.gather_group = dist::new_process_group(env, store, "gloo", po);
      }
      ShardedDataParallel sdp(model, borrow(pg), o);
      ShardedOptimizer opt(sdp, sgd);
      autograd::backward(ops::cross_entropy(sdp.forward(batch(rank)), labels()));
      expect_refused_then_runs([&] { opt.step(); }, *model, "ShardedOptimizer::step", errors[rank], stage == 2);
    }, dist::ProcessGroupOptions{});
    EXPECT_EQ(errors[0], errors[1]);
  }
}
