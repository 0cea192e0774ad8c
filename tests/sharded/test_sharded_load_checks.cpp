// test_sharded_load_checks.cpp - the ZeRO-2/3 loaders check the WHOLE input, not this rank's segments of it:
// a missing parameter, a state of the wrong size and a transposed value are refused on every rank with the
// same message naming the tensor (issue 36 item 5); the messages of ShardOptions::units naming a module
// inside another unit, and of a ZeRO-3 model read after its wrapper was destroyed (item 11). The generated
// corpus over every loader and stage is test_sharded_bad_input.cpp.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "models/mlp.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/nn/layers.h"

using namespace ddp;

namespace {

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

std::shared_ptr<dist::ProcessGroup> gather_group(const dist::DistEnv& env, dist::Store& store) {
  dist::ProcessGroupOptions po;
  po.name = "gather";
  return dist::new_process_group(env, store, "gloo", po);
}

std::shared_ptr<nn::Module> mlp() {
  nn::manual_seed(5);
  return std::make_shared<models::MLP>(models::MLPConfig{12, {16, 8}, 5, DType::F64});
}

// A wrapper of `stage` over `model` at world 2 with an AdamW inside; fn(sdp, opt) runs on every rank and
// returns what happened there ("ok" or the error's message); the ranks' outcomes are returned.
std::vector<std::string> on_two_ranks(int stage, const std::function<std::shared_ptr<nn::Module>()>& make,
                                      const std::function<void(ShardedDataParallel&, ShardedOptimizer&)>& fn,
                                      ShardOptions base = {}) {
  std::vector<std::string> out(2);
  dist::run_threads(
      2,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        ShardOptions o = base;
        o.stage = stage;
        if (stage == 3) {
          dist::DistEnv env;
          env.rank = rank;
          env.world_size = 2;
          o.gather_group = gather_group(env, store);
        }
        ShardedDataParallel sdp(make(), borrow(pg), o);
        ShardedOptimizer opt(sdp, [](std::vector<nn::NamedTensor> ps) {
          return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{});
        });
        try {
          fn(sdp, opt);
          out[rank] = "ok";
        } catch (const Error& e) {
          out[rank] = e.what();
        }
      },
      dist::ProcessGroupOptions{}, "gloo");
  return out;
}

std::map<std::string, Tensor> whole_params() {
  std::map<std::string, Tensor> m;
  for (auto& p : mlp()->named_parameters()) m[p.name] = p.tensor;
  return m;
}

std::map<std::string, Tensor> whole_adamw_state() {
  std::map<std::string, Tensor> s;
  for (auto& p : mlp()->named_parameters()) {
    s[p.name + ".exp_avg"] = Tensor::zeros(p.tensor.shape(), DType::F64);
    s[p.name + ".exp_avg_sq"] = Tensor::zeros(p.tensor.shape(), DType::F64);
    s[p.name + ".step"] = Tensor::from_data<int64_t>({1}, {});
  }
  return s;
}

void expect_refused_everywhere(const std::vector<std::string>& outcomes, const std::string& words) {
  for (size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_NE(outcomes[r].find(words), std::string::npos) << "rank " << r << ": " << outcomes[r];
  EXPECT_EQ(outcomes[0], outcomes[1]);
}

}  // namespace

TEST(ShardedLoadChecks, LoadParametersWithoutOneNameIsRefusedOnEveryRank) {
  for (int stage : {2, 3})
    for (auto& [name, t] : whole_params()) {
      SCOPED_TRACE("zero" + std::to_string(stage) + " without " + name);
      auto values = whole_params();
      values.erase(name);
      expect_refused_everywhere(
          on_two_ranks(stage, mlp,
                       [&](ShardedDataParallel& sdp, ShardedOptimizer&) { sdp.load_parameters(values); }),
          "'" + name + "'");
    }
}

TEST(ShardedLoadChecks, ConsolidatedStateOfTheWrongSizeIsRefusedOnEveryRank) {
  for (int stage : {2, 3})
    for (const std::string name : {"layers.0.weight.exp_avg", "layers.4.bias.exp_avg_sq"}) {
      SCOPED_TRACE("zero" + std::to_string(stage) + " " + name);
      auto state = whole_adamw_state();
      state[name] = Tensor::zeros({state[name].numel() + 3}, DType::F64);
      expect_refused_everywhere(on_two_ranks(stage, mlp,
                                             [&](ShardedDataParallel&, ShardedOptimizer& opt) {
                                               opt.load_consolidated_state(state, 1);
                                             }),
                                "'" + name + "'");
    }
}

TEST(ShardedLoadChecks, ATransposedValueIsRefusedNotReadInTheWrongOrder) {
  for (int stage : {2, 3}) {
    SCOPED_TRACE("zero" + std::to_string(stage));
    auto values = whole_params();
    values["layers.2.weight"] = Tensor::zeros({16, 8}, DType::F64);  // the model's is (8, 16)
    expect_refused_everywhere(
        on_two_ranks(stage, mlp,
                     [&](ShardedDataParallel& sdp, ShardedOptimizer&) { sdp.load_parameters(values); }),
        "'layers.2.weight' has shape (16, 8)");
    auto state = whole_adamw_state();
    state["layers.2.weight.exp_avg"] = Tensor::zeros({16, 8}, DType::F64);
    expect_refused_everywhere(on_two_ranks(stage, mlp,
                                           [&](ShardedDataParallel&, ShardedOptimizer& opt) {
                                             opt.load_consolidated_state(state, 1);
                                           }),
                              "'layers.2.weight.exp_avg' has shape (16, 8)");
  }
}

// Units {"0", "0.0"} where 0.0 is inside 0: not "no module" (it is one), but a unit inside a unit.
TEST(ShardedLoadChecks, AUnitInsideAnotherUnitIsNamedAsSuch) {
  auto nested = [] {
    nn::manual_seed(5);
    auto inner = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(12, 8, true, DType::F64), std::make_shared<nn::ReLU>()});
    return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        inner, std::make_shared<nn::Linear>(8, 5, true, DType::F64)});
  };
  std::vector<std::string> out(2);
  dist::run_threads(
      2,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        ShardOptions o;
        o.stage = 3;
        o.units = {"0", "0.0"};
        dist::DistEnv env;
        env.rank = rank;
        env.world_size = 2;
        o.gather_group = gather_group(env, store);
        try {
          ShardedDataParallel sdp(nested(), borrow(pg), o);
          out[rank] = "ok";
        } catch (const Error& e) {
          out[rank] = e.what();
        }
      },
      dist::ProcessGroupOptions{}, "gloo");
  expect_refused_everywhere(out, "\"0.0\", which is inside unit \"0\"");
  EXPECT_EQ(out[0].find("no module"), std::string::npos) << out[0];
}

TEST(ShardedLoadChecks, AZero3ModelReadAfterItsWrapperIsDestroyedSaysSo) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    auto model = mlp();
    {
      ShardOptions o;
      o.stage = 3;
      ShardedDataParallel sdp(model, borrow(pg), o);
    }
    try {
      (void)model->parameters().front().to_double_vector();
      ADD_FAILURE() << "a parameter of a destroyed ZeRO-3 wrapper was readable";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("was destroyed"), std::string::npos) << m;
      EXPECT_NE(m.find("gathered_parameters"), std::string::npos) << m;
      EXPECT_EQ(m.find("used outside its unit's forward"), std::string::npos) << m;
    }
  });
}
