// test_sharded_equivalence.cpp - ZeRO-2 and ZeRO-3 (ShardedDataParallel + ShardedOptimizer) in float64 equal
// one process that accumulates the same ranks' slices (each loss / world) and steps a plain optimizer: worlds
// 1-4, SGD with momentum and AdamW, with and without clipping by the global norm, on gloo and shm, prefetch
// 0-2, reshard after forward on and off, a separate gather group or not; a model whose units run in another
// order than they were registered; a parameter that one rank does not use (find_unused_parameters) and one
// that no rank uses; uneven inputs under Join; no_sync accumulation. Every rank's parameters are also
// bitwise equal to each other's after every run.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <mutex>

#include "models/branchy.h"
#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/join.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/nn/layers.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/loss.h"
#include "runtime/trace/trace.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/elementwise.h"
#include "tests/support/ddp_test_util.h"
#include "tests/support/shared_linear.h"

using namespace ddp;
using namespace ddp::testing;

namespace {

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

constexpr int64_t kRowsPerRank = 3;
constexpr int kFeatures = 12, kClasses = 5;

Batch batch_of(int step, int rank) {
  Batch b;
  b.x = Tensor::randn({kRowsPerRank, kFeatures}, 900 + 31 * step + rank, DType::F64);
  std::vector<int64_t> y(kRowsPerRank);
  for (int64_t i = 0; i < kRowsPerRank; ++i) y[i] = (i * 7 + step + 3 * rank) % kClasses;
  b.y = Tensor::from_data(y, {kRowsPerRank});
  return b;
}

enum class Opt { AdamW, SGD };
std::unique_ptr<optim::Optimizer> make_optimizer(Opt which, std::vector<nn::NamedTensor> ps) {
  if (which == Opt::AdamW)
    return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 0.02, .weight_decay = 0.1});
  return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
}

// Registered as a, b, c (ModuleList items "0", "1", "2") but run c, a, b: the agreed order must follow.
class Reordered : public nn::Module {
 public:
  Reordered() {
    items = register_module("items", std::make_shared<nn::ModuleList<nn::Linear>>());
    items->push_back(std::make_shared<nn::Linear>(16, 8, true, DType::F64));
    items->push_back(std::make_shared<nn::Linear>(8, kClasses, true, DType::F64));
    items->push_back(std::make_shared<nn::Linear>(kFeatures, 16, true, DType::F64));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::relu((*items)[2].operator()(x));
    h = ops::relu((*items)[0].operator()(h));
    return (*items)[1].operator()(h);
  }
  std::shared_ptr<nn::ModuleList<nn::Linear>> items;
};

// Tied weights: "mid" and "again" use one 8 x 8 weight (their biases are their own).
class Tied : public nn::Module {
 public:
  Tied() {
    in = register_module("in", std::make_shared<nn::Linear>(kFeatures, 8, true, DType::F64));
    auto m = std::make_shared<nn::Linear>(8, 8, true, DType::F64);
    mid = register_module("mid", m);
    again = register_module("again", std::make_shared<SharedLinear>(m->weight,
                                                                    Tensor::zeros({8}, DType::F64)));
    head = register_module("head", std::make_shared<nn::Linear>(8, kClasses, true, DType::F64));
  }
  Tensor forward(const Tensor& x) override {
    return (*head)(ops::relu((*again)(ops::relu((*mid)(ops::relu((*in)(x)))))));
  }
  std::shared_ptr<nn::Linear> in, mid, head;
  std::shared_ptr<SharedLinear> again;
};

enum class Model { MLP, Reordered, Branchy, Tied };
std::shared_ptr<nn::Module> make_model(Model m) {
  nn::manual_seed(77);
  switch (m) {
    case Model::MLP:
      return std::make_shared<models::MLP>(models::MLPConfig{kFeatures, {16, 8}, kClasses, DType::F64});
    case Model::Reordered:
      return std::make_shared<Reordered>();
    case Model::Tied:
      return std::make_shared<Tied>();
    default:
      return std::make_shared<models::Branchy>(models::BranchyConfig{kFeatures, 10, kClasses, DType::F64});
  }
}

struct Case {
  int stage = 2;
  int world = 2;
  Opt opt = Opt::AdamW;
  bool clip = false;
  std::string backend = "gloo";
  bool gather_group = false;
  int prefetch = 1;
  bool reshard = true;
  Model model = Model::MLP;
  bool find_unused = false;
  bool static_graph = false;
  bool gather_bf16 = false;
  std::vector<std::string> units;
  int steps = 5;
  int accumulation = 1;  // micro-steps per step (no_sync for all but the last)
  // Join: rank r trains steps - uneven * r steps (0: even).
  int uneven = 0;
};

constexpr double kClip = 0.05;

int steps_of(const Case& s, int rank) { return s.steps - s.uneven * rank; }

// A consolidated checkpoint: whole parameters and the whole optimizer state by name, and the step count.
struct Checkpoint {
  std::map<std::string, Tensor> params, optim;
  int64_t steps = 0;
};

// One process: for every step, each rank's slices (loss / world) accumulated, then the plain optimizer.
// world_of(step): the world size that ran that step (a resumed run changes it); default s.world.
std::vector<std::vector<double>> reference(const Case& s, const std::function<int(int)>& world_of = nullptr) {
  auto model = make_model(s.model);
  auto opt = make_optimizer(s.opt, model->named_parameters());
  for (int step = 0; step < s.steps; ++step) {
    model->zero_grad();
    bool any = false;
    const int world = world_of ? world_of(step) : s.world;
    for (int r = 0; r < world; ++r) {
      if (step >= steps_of(s, r)) continue;
      any = true;
      for (int a = 0; a < s.accumulation; ++a) {
        Batch b = batch_of(step * s.accumulation + a, r);
        Tensor loss = ops::cross_entropy((*model)(b.x), b.y) * (1.0 / (world * s.accumulation));
        autograd::backward(loss);
      }
    }
    if (!any) break;
    if (s.clip) optim::clip_grad_norm_(model->parameters(), kClip);
    opt->step();
  }
  return snapshot_params(*model);
}

// Steps [from, steps) of s; from `start` when given; `save` (rank 0's view) gets the consolidated checkpoint.
std::vector<std::vector<std::vector<double>>> run_sharded(const Case& s, int from = 0,
                                                          const Checkpoint* start = nullptr,
                                                          Checkpoint* save = nullptr) {
  std::vector<std::vector<std::vector<double>>> finals(s.world);
  dist::run_threads(
      s.world,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        auto model = make_model(s.model);
        ShardOptions o;
        o.stage = s.stage;
        o.prefetch = s.prefetch;
        o.reshard_after_forward = s.reshard;
        o.units = s.units;
        o.ddp.find_unused_parameters = s.find_unused;
        o.ddp.static_graph = s.static_graph;
        o.gather_bf16 = s.gather_bf16;
        if (s.gather_group || (s.stage == 3 && s.world > 1)) {  // ZeRO-3 requires one
          dist::DistEnv env;
          env.rank = rank;
          env.world_size = s.world;
          dist::ProcessGroupOptions po;
          po.name = "gather";
          o.gather_group = dist::new_process_group(env, store, s.backend, po);
        }
        ShardedDataParallel sdp(model, borrow(pg), o);
        ShardedOptimizer opt(sdp, [&](std::vector<nn::NamedTensor> ps) { return make_optimizer(s.opt, ps); });
        std::unique_ptr<Join> join;
        if (s.uneven > 0) {
          JoinOptions jo;
          jo.joinables = {&sdp, &opt};
          join = std::make_unique<Join>(sdp.ddp(), jo);
          if (s.clip) opt.set_join_gradient_transform([&] { sdp.clip_grad_norm_(kClip); });
        }
        if (start) {
          sdp.load_parameters(start->params);
          opt.load_consolidated_state(start->optim, start->steps);
        }
        for (int step = from; step < steps_of(s, rank); ++step) {
          for (int a = 0; a < s.accumulation; ++a) {
            Batch b = batch_of(step * s.accumulation + a, rank);
            auto one = [&] {
              Tensor loss = ops::cross_entropy(sdp.forward(b.x), b.y) * (1.0 / s.accumulation);
              autograd::backward(loss);
            };
            if (a + 1 < s.accumulation) {
              auto guard = sdp.no_sync();
              one();
            } else {
              one();
            }
          }
          if (s.clip) sdp.clip_grad_norm_(kClip);
          opt.step();
          opt.zero_grad();
        }
        if (join) join->join();
        auto state = save ? opt.consolidated_state() : std::map<std::string, Tensor>{};
        auto whole = sdp.gathered_parameters();
        finals[rank] = snapshot_params(*model);
        if (save && rank == 0) {
          save->optim = state;
          save->steps = opt.steps() + (start ? start->steps : 0);
          for (auto& p : model->named_parameters()) save->params[p.name] = p.tensor.clone();
        }
      },
      dist::ProcessGroupOptions{}, s.backend);
  return finals;
}

void expect_equivalent(const Case& s) {
  const auto finals = run_sharded(s);
  const auto ref = reference(s);
  for (int r = 1; r < s.world; ++r) EXPECT_EQ(finals[r], finals[0]) << "rank " << r << " differs from rank 0";
  EXPECT_LT(max_relative_difference(finals[0], ref), 1e-12);
  // The run must have moved the parameters (a no-op step would also be "equal").
  const auto start = snapshot_params(*make_model(s.model));
  EXPECT_GT(max_relative_difference(ref, start), 1e-3);
}

// expect_equivalent for ZeRO-2 and ZeRO-3 at worlds 2 and 3, each case set up by `set`.
void expect_equivalent_at_stages_2_3_worlds_2_3(const std::function<void(Case&)>& set) {
  for (int stage : {2, 3})
    for (int world : {2, 3}) {
      SCOPED_TRACE("zero" + std::to_string(stage) + " world " + std::to_string(world));
      Case s;
      s.stage = stage;
      s.world = world;
      set(s);
      expect_equivalent(s);
    }
}

std::string name_of(const Case& s) {
  return "zero" + std::to_string(s.stage) + "_world" + std::to_string(s.world) +
         (s.opt == Opt::AdamW ? "_adamw" : "_sgd") + (s.clip ? "_clip" : "") + "_" + s.backend;
}

}  // namespace

class ShardedEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedEquivalence, EqualsOneProcessOnTheWholeBatch) { expect_equivalent(GetParam()); }

std::vector<Case> grid() {
  std::vector<Case> out;
  for (int stage : {2, 3})
    for (int world : {1, 2, 3, 4})
      for (Opt opt : {Opt::SGD, Opt::AdamW}) {
        Case s;
        s.stage = stage;
        s.world = world;
        s.opt = opt;
        s.clip = world % 2 == 0;
        out.push_back(s);
      }
  for (int stage : {2, 3})
    for (int world : {2, 3}) {
      Case s;
      s.stage = stage;
      s.world = world;
      s.backend = "shm";
      s.clip = true;
      out.push_back(s);
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grid, ShardedEquivalence, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<Case>& i) { return name_of(i.param); });

TEST(ShardedZero3, PrefetchDepthsAndReshardChoicesGiveTheSameResult) {
  for (int prefetch : {0, 1, 2})
    for (bool reshard : {true, false}) {
      SCOPED_TRACE("prefetch " + std::to_string(prefetch) + (reshard ? " reshard" : " keep"));
      Case s;
      s.stage = 3;
      s.world = 2;
      s.prefetch = prefetch;
      s.reshard = reshard;
      s.gather_group = true;
      expect_equivalent(s);
    }
}

TEST(ShardedZero3, UnitsRunInAnotherOrderThanRegistered) {
  for (int world : {2, 3}) {
    Case s;
    s.stage = 3;
    s.world = world;
    s.model = Model::Reordered;
    s.prefetch = 2;
    expect_equivalent(s);
  }
}

TEST(ShardedUnused, AParameterOneRankDoesNotUseAndOneNoRankUses) {
  // Branchy: each rank picks an expert from its data, so ranks differ in what they use.
  expect_equivalent_at_stages_2_3_worlds_2_3([](Case& s) {
    s.model = Model::Branchy;
    s.find_unused = true;
    s.gather_group = true;
    s.units = {"trunk", "expert0", "expert1"};
  });
}

TEST(ShardedJoin, UnevenInputsEqualTheReference) {
  expect_equivalent_at_stages_2_3_worlds_2_3([](Case& s) {
    s.uneven = 1;
    s.clip = true;
    s.gather_group = true;
  });
}

TEST(ShardedNoSync, GradientAccumulationEqualsTheReference) {
  for (int stage : {2, 3}) {
    Case s;
    s.stage = stage;
    s.world = 2;
    s.accumulation = 3;
    expect_equivalent(s);
  }
}

TEST(ShardedRefusals, WhatAModeCannotDoIsRefusedAtConstructionWithTheReason) {
  auto expect_refused = [](int stage, const std::function<void(ShardOptions&)>& set, const std::string& words) {
    dist::run_threads(2, [&](int, dist::ProcessGroup& pg) {
      ShardOptions o;
      o.stage = stage;
      set(o);
      try {
        ShardedDataParallel sdp(make_model(Model::MLP), borrow(pg), o);
        ADD_FAILURE() << "not refused: " << words;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      }
    });
  };
  expect_refused(3, [](ShardOptions&) {}, "ZeRO-3 needs ShardOptions::gather_group");
  expect_refused(2, [](ShardOptions& o) { o.ddp.gradient_as_bucket_view = true; }, "gradient_as_bucket_view");
  expect_refused(2, [](ShardOptions& o) { o.ddp.comm_hook = std::make_shared<AllreduceHook>(); }, "comm hook");
  expect_refused(1, [](ShardOptions&) {}, "stage 1 is ZeroRedundancyOptimizer");
}

TEST(ShardedZero3, AParameterReadOutsideItsUnitIsANamedError) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    auto model = make_model(Model::MLP);
    ShardOptions o;
    o.stage = 3;
    ShardedDataParallel sdp(model, borrow(pg), o);
    try {
      (void)model->parameters().front().to_double_vector();
      ADD_FAILURE() << "a sharded parameter was readable at rest";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("has no memory: it is a ZeRO-3 parameter"), std::string::npos) << e.what();
    }
    auto whole = sdp.gathered_parameters();
    EXPECT_EQ(model->parameters().front().to_double_vector().size(), 12u * 16u);
  });
}

// A run checkpointed (consolidated: whole parameters and optimizer state) at one world size resumes at
// another and lands where the uninterrupted run lands: 2 -> 3 and 4 -> 1, both stages, both optimizers.
TEST(ShardedCheckpoint, ResumeAtAnotherWorldSizeEqualsTheUninterruptedRun) {
  for (int stage : {2, 3})
    for (auto [w1, w2] : {std::pair{2, 3}, std::pair{4, 1}})
      for (Opt opt : {Opt::AdamW, Opt::SGD}) {
        SCOPED_TRACE("zero" + std::to_string(stage) + " " + std::to_string(w1) + " -> " + std::to_string(w2) +
                     (opt == Opt::AdamW ? " adamw" : " sgd"));
        Case first;
        first.stage = stage;
        first.world = w1;
        first.opt = opt;
        first.steps = 3;
        first.clip = true;
        Checkpoint ck;
        run_sharded(first, 0, nullptr, &ck);
        ASSERT_FALSE(ck.optim.empty());
        Case second = first;
        second.world = w2;
        second.steps = 5;
        const auto finals = run_sharded(second, 3, &ck);
        const auto ref = reference(second, [&](int step) { return step < 3 ? w1 : w2; });
        for (int r = 1; r < w2; ++r) EXPECT_EQ(finals[r], finals[0]);
        EXPECT_LT(max_relative_difference(finals[0], ref), 1e-12);
      }
}

// The consolidated state has the plain optimizer's names and values: a plain AdamW over the whole model after
// the same steps holds the same state.
TEST(ShardedCheckpoint, ConsolidatedStateIsThePlainOptimizersState) {
  Case s;
  s.stage = 3;
  s.world = 3;
  s.steps = 3;
  Checkpoint ck;
  run_sharded(s, 0, nullptr, &ck);
  auto model = make_model(s.model);
  auto plain = make_optimizer(s.opt, model->named_parameters());
  for (int step = 0; step < s.steps; ++step) {
    model->zero_grad();
    for (int r = 0; r < s.world; ++r) {
      Batch b = batch_of(step, r);
      autograd::backward(ops::cross_entropy((*model)(b.x), b.y) * (1.0 / s.world));
    }
    plain->step();
  }
  const auto want = plain->state();
  ASSERT_EQ(ck.optim.size(), want.size());
  for (auto& [name, t] : want) {
    ASSERT_TRUE(ck.optim.count(name)) << name;
    EXPECT_EQ(ck.optim.at(name).shape(), t.shape()) << name;
    EXPECT_LT(max_relative_difference({ck.optim.at(name).to_double_vector()}, {t.to_double_vector()}), 1e-12)
        << name;
  }
}

TEST(ShardedStaticGraph, StaticGraphEqualsTheReference) {
  for (int stage : {2, 3})
    for (Model m : {Model::MLP, Model::Branchy}) {
      SCOPED_TRACE("zero" + std::to_string(stage) + (m == Model::MLP ? " mlp" : " branchy"));
      Case s;
      s.stage = stage;
      s.world = 2;
      s.model = m;
      s.static_graph = true;
      if (m == Model::Branchy) s.units = {"trunk", "expert0", "expert1"};
      // Branchy's experts change with the data; static_graph needs the same graph every step: keep the
      // MLP's, and for Branchy only the steps where each rank keeps its expert are valid - one step.
      if (m == Model::Branchy) s.steps = 1;
      expect_equivalent(s);
    }
}

// With tracing on, every ZeRO-2/3 gather is an "all-gather bucket N" event (category gather) that ends after
// it begins, and the trace has the reduce-scatters. At world 1 a gather may finish inside the call that
// issues it: its begin used to be taken after the call, so the tracer refused the event ("end ... is before
// begin") and the step threw (seen with shm at world 2 under train --trace).
TEST(ShardedTrace, GathersAndReduceScattersAreTraced) {
  auto& tr = trace::global_tracer();
  tr.clear();
  tr.set_enabled(true);
  for (int stage : {2, 3})
    for (int world : {1, 2}) {
      Case s;
      s.stage = stage;
      s.world = world;
      s.backend = "shm";
      s.steps = 3;
      EXPECT_NO_THROW(run_sharded(s));
    }
  tr.set_enabled(false);
  int gathers = 0, scatters = 0;
  for (const auto& e : tr.events()) {
    if (e.name.rfind("all-gather bucket ", 0) == 0) ++gathers;
    if (e.name.rfind("reduce-scatter bucket ", 0) == 0) ++scatters;
  }
  tr.clear();
  EXPECT_GT(gathers, 0);
  EXPECT_GT(scatters, 0);
}

// ZeRO-3 gathering in bfloat16: every rank computes with the same rounded parameters (bitwise equal ranks),
// the result stays close to the exact run (float32 master weights and reduce-scatter) but is not equal to it
// (the rounding happened); ZeRO-2 refuses it.
TEST(ShardedGatherBf16, RanksAgreeAndTheRunStaysCloseToTheExactOne) {
  for (int world : {2, 3}) {
    Case s;
    s.stage = 3;
    s.world = world;
    s.gather_bf16 = true;
    const auto low = run_sharded(s);
    for (int r = 1; r < world; ++r) EXPECT_EQ(low[r], low[0]) << "rank " << r;
    const auto ref = reference(s);
    const double d = max_relative_difference(low[0], ref);
    EXPECT_GT(d, 1e-9) << "no rounding happened";
    EXPECT_LT(d, 5e-2);
  }
  dist::run_threads(2, [&](int, dist::ProcessGroup& pg) {
    ShardOptions o;
    o.stage = 2;
    o.gather_bf16 = true;
    EXPECT_THROW(ShardedDataParallel(make_model(Model::MLP), borrow(pg), o), Error);
  });
}

// Tied weights (one tensor registered in two modules) are one parameter: ZeRO-2 and ZeRO-3 (the tie inside one
// unit: the root) equal the reference, which steps the tied weight once with the sum of both uses' gradients.
TEST(ShardedTied, TiedWeightsAreOneParameter) {
  EXPECT_EQ(make_model(Model::Tied)->named_parameters().size(), 7u);  // in 2, mid 2, again 1 (bias), head 2
  expect_equivalent_at_stages_2_3_worlds_2_3([](Case& s) { s.model = Model::Tied; });
}
