// test_nested_backward_ddp.cpp - nested backwards (activation checkpointing) under DDP at worlds 1 and 2:
// with static_graph a weight used inside a checkpointed block and before and/or after it trains exactly like
// the uncheckpointed model (gradients as bucket views or not); without static_graph such a weight is a clear
// "marked ready twice" error on every rank (no crash, no hang), and a block whose weights are its own trains
// like the uncheckpointed model.
#include <gtest/gtest.h>

#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/checkpoint_block.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

// Three SGD steps of SharedWeightNet under DDP; every rank's final parameters (equal across ranks).
std::vector<std::vector<double>> train(int world, Placement p, bool ckpt, DDPOptions o) {
  std::vector<std::vector<std::vector<double>>> per_rank(world);
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(9);
    auto model = std::make_shared<SharedWeightNet>(p, ckpt, DType::F64);
    DistributedDataParallel ddp(model, borrow(pg), o);
    optim::SGD opt(model->named_parameters(), {.lr = 0.1});
    for (int s = 0; s < 3; ++s) {
      Tensor x = Tensor::randn({3, 5}, 300 + 10 * s + rank, DType::F64);
      std::vector<int64_t> y = {static_cast<int64_t>(s % 3), 1, static_cast<int64_t>(rank % 3)};
      opt.zero_grad();
      autograd::backward(ops::cross_entropy(ddp.forward(x), Tensor::from_data(y, {3})));
      opt.step();
    }
    per_rank[rank] = snapshot_params(*model);
  });
  for (int r = 1; r < world; ++r) EXPECT_EQ(per_rank[r], per_rank[0]) << "rank " << r;
  return per_rank[0];
}
}  // namespace

TEST(NestedBackwardDdp, StaticGraphTrainsASharedWeightLikeTheUncheckpointedModel) {
  for (int world : {1, 2})
    for (const Placement& p : all_placements())
      for (bool as_view : {false, true}) {
        SCOPED_TRACE("world " + std::to_string(world) + ", " + p.name() + (as_view ? ", bucket views" : ""));
        DDPOptions plain;
        plain.gradient_as_bucket_view = as_view;
        DDPOptions fixed = plain;
        fixed.static_graph = true;
        const auto reference = train(world, p, false, plain);
        EXPECT_LT(max_relative_difference(train(world, p, true, fixed), reference), 1e-12);
      }
}

TEST(NestedBackwardDdp, WithoutStaticGraphASharedWeightIsAClearErrorOnEveryRank) {
  for (int world : {1, 2})
    for (const Placement& p : all_placements()) {
      SCOPED_TRACE("world " + std::to_string(world) + ", " + p.name());
      if (!p.shares_w()) {  // the block's weights are used by the inner backward only: nothing fires twice
        EXPECT_LT(max_relative_difference(train(world, p, true, {}), train(world, p, false, {})), 1e-12);
        continue;
      }
      try {
        train(world, p, true, {});
        ADD_FAILURE() << "the dynamic reducer accepted a parameter marked ready twice";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("marked ready twice"), std::string::npos) << e.what();
      }
    }
}
