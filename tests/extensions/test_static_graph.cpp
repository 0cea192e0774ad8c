// test_static_graph.cpp - DDP static_graph: the branchy model with a fixed expert per rank trains exactly like
// find_unused_parameters, with no reachability search after iteration 1 (reducer statistics); a parameter used
// both inside an activation-checkpointed block (a nested backward) and outside it fires its hook twice per
// step - refused by the dynamic reducer, handled by static_graph and equal to the uncheckpointed run; a
// parameter unused in iteration 1 that later gets a gradient is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "models/branchy.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/node.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

struct BranchyRun {
  std::vector<std::vector<double>> params;
  std::vector<IterationStats> stats;  // rank 0, per step
};

// Rank r always takes expert r % 2: its rows' first feature has the sign that selects it.
BranchyRun train_branchy(int world, bool static_graph, int steps) {
  BranchyRun out;
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(3);
    auto model = std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64});
    DDPOptions o;
    o.find_unused_parameters = !static_graph;
    o.static_graph = static_graph;
    DistributedDataParallel ddp(model, borrow(pg), o);
    optim::SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < steps; ++s) {
      Tensor x = Tensor::randn({4, 6}, 70 + 10 * s + rank, DType::F64);
      double* d = x.data<double>();
      for (int i = 0; i < 4; ++i) d[i * 6] = (rank % 2 == 0 ? 1.0 : -1.0) * (0.5 + std::fabs(d[i * 6]));
      std::vector<int64_t> y = {0, 1, 2, static_cast<int64_t>(s % 3)};
      opt.zero_grad();
      autograd::backward(ops::cross_entropy(ddp.forward(x), Tensor::from_data(y, {4})));
      opt.step();
      if (rank == 0) out.stats.push_back(ddp.reducer().last_stats());
    }
    if (rank == 0) out.params = snapshot_params(*model);
  });
  return out;
}
}  // namespace

TEST(StaticGraph, BranchyWithAFixedExpertPerRankMatchesFindUnusedWithoutTheSearch) {
  for (int world : {2, 3}) {
    BranchyRun dynamic = train_branchy(world, false, 5);
    BranchyRun fixed = train_branchy(world, true, 5);
    EXPECT_LT(max_relative_difference(fixed.params, dynamic.params), 1e-13) << "world " << world;
    for (size_t s = 0; s < 5; ++s) {
      EXPECT_EQ(dynamic.stats[s].num_reachability_searches, 1u) << "step " << s;
      EXPECT_EQ(fixed.stats[s].num_reachability_searches, 0u) << "step " << s;
      EXPECT_EQ(fixed.stats[s].unused_search_s, 0.0);
      // Rank 0 never uses expert1 nor never_used: both marked ready (zeros) every iteration, as find_unused does.
      EXPECT_EQ(fixed.stats[s].num_unused_marked, dynamic.stats[s].num_unused_marked) << "step " << s;
    }
  }
}

namespace {
// Activation checkpointing in miniature: forward runs fn without recording; backward recomputes fn with
// recording on and runs a nested backward through it, returning the input's gradient.
struct CheckpointNode final : autograd::Node {
  std::function<Tensor(const Tensor&)> fn;
  Tensor x;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor xi = x.detach();
    xi.set_requires_grad(true);
    Tensor y;
    {
      autograd::EnableGradGuard eg;
      y = fn(xi);
    }
    autograd::backward({y}, {grads[0]});
    return {xi.grad()};
  }
  const char* name() const override { return "checkpoint"; }
};

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
  Tensor y;
  {
    autograd::NoGradGuard ng;
    y = fn(x);
  }
  auto node = std::make_shared<CheckpointNode>();
  node->fn = fn;
  node->x = x.detach();
  autograd::record(node, {&x}, {&y});
  return y;
}

// h = tanh(x W^T) checkpointed, then out = h W^T + b: W is used inside the checkpoint and outside it.
struct Tied : nn::Module {
  explicit Tied(bool use_checkpoint) : ckpt(use_checkpoint) {
    w = register_parameter("w", Tensor::randn({5, 5}, nn::next_init_seed(), DType::F64, 0.4));
    b = register_parameter("b", Tensor::randn({5}, nn::next_init_seed(), DType::F64, 0.1));
  }
  Tensor forward(const Tensor& x) override {
    auto block = [this](const Tensor& in) { return ops::tanh(ops::linear(in, w)); };
    Tensor h = ckpt ? checkpoint(block, ops::mul_scalar(x, 1.0)) : block(x);
    return ops::linear(h, w, b);
  }
  bool ckpt;
  Tensor w, b;
};

std::vector<std::vector<double>> train_tied(int world, bool use_checkpoint, bool static_graph, int steps) {
  std::vector<std::vector<double>> params;
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(9);
    auto model = std::make_shared<Tied>(use_checkpoint);
    DDPOptions o;
    o.static_graph = static_graph;
    DistributedDataParallel ddp(model, borrow(pg), o);
    optim::SGD opt(model->named_parameters(), {.lr = 0.1});
    for (int s = 0; s < steps; ++s) {
      Tensor x = Tensor::randn({3, 5}, 300 + 10 * s + rank, DType::F64);
      std::vector<int64_t> y = {static_cast<int64_t>(s % 5), 1, 3};
      opt.zero_grad();
      autograd::backward(ops::cross_entropy(ddp.forward(x), Tensor::from_data(y, {3})));
      opt.step();
    }
    if (rank == 0) params = snapshot_params(*model);
  });
  return params;
}
}  // namespace

TEST(StaticGraph, AParameterUsedInsideAndOutsideACheckpointWorks) {
  // Dynamic: w's hook fires in the nested backward and again in the outer one.
  try {
    train_tied(1, true, false, 1);
    ADD_FAILURE() << "the dynamic reducer accepted a parameter marked ready twice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("marked ready twice"), std::string::npos) << e.what();
  }
  for (int world : {1, 2}) {
    auto plain = train_tied(world, false, false, 4);
    auto ckpt = train_tied(world, true, true, 4);
    EXPECT_LT(max_relative_difference(ckpt, plain), 1e-12) << "world " << world;
  }
}

TEST(StaticGraph, AGradientForAParameterUnusedInIterationOneIsAClearError) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    nn::manual_seed(3);
    auto model = std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64});
    DDPOptions o;
    o.static_graph = true;
    DistributedDataParallel ddp(model, borrow(pg), o);
    auto step = [&](double sign) {
      Tensor x = Tensor::randn({4, 6}, 5, DType::F64);
      double* d = x.data<double>();
      for (int i = 0; i < 4; ++i) d[i * 6] = sign * (0.5 + std::fabs(d[i * 6]));
      autograd::backward(ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1, 2, 0}, {4})));
    };
    step(1.0);  // expert0
    step(1.0);
    try {
      step(-1.0);  // expert1 was unused in iteration 1
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Your training graph has changed"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("expert1"), std::string::npos) << e.what();
    }
  });
}
