// test_unused_parameter_message.cpp - what the unused-parameter error (and static_graph's "graph changed"
// error) tells the user: the iteration it happened in (synchronized iterations counted from 1, failed ones
// and Join shadows included, no_sync backwards not; or from Reducer::number_iterations_from), the fix in the
// caller's words (ReducerOptions::advice) or the C++ option by default, when "0 * output.sum()" helps, and
// "the other ranks were kept in step" only where there are other ranks. Worlds 1-4; every rank skipping the
// layer, or only the last one (the others raise nothing and nobody hangs).
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/nn/layers.h"
#include "runtime/ops/reduce.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

// a, then b unless skip_b: with skip_b the forward does not run b at all (a branch not taken).
struct SkippableLayer : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  bool skip_b = false;
  SkippableLayer() {
    a = register_module("a", std::make_shared<nn::Linear>(4, 4, true, DType::F64));
    b = register_module("b", std::make_shared<nn::Linear>(4, 3, true, DType::F64));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = a->forward(x);
    return skip_b ? h : b->forward(h);
  }
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One synchronized (or no_sync) forward and backward; the error's text, "" when none.
std::string step(DistributedDataParallel& ddp, SkippableLayer& m, bool skip_b, bool synchronized = true) {
  m.skip_b = skip_b;
  Tensor x = Tensor::randn({2, 4}, 11, DType::F64);
  std::optional<DistributedDataParallel::NoSyncGuard> no_sync;
  if (!synchronized) no_sync.emplace(ddp.reducer());
  Tensor loss = ops::sum(ddp.forward(x));
  try {
    autograd::backward(loss);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// What every message says whatever the world: the parameters, and fix 2 with when it applies.
void expect_common_parts(const std::string& m, const std::string& where) {
  EXPECT_TRUE(has(m, "[2] b.weight  shape (3, 4)")) << where << m;
  EXPECT_TRUE(has(m, "[3] b.bias")) << where << m;
  EXPECT_FALSE(has(m, "a.weight")) << where << m;
  EXPECT_TRUE(has(m, "0 * output.sum()")) << where << m;
  EXPECT_TRUE(has(m, "cannot help a layer the forward did not run")) << where << m;
}
}  // namespace

// Iterations 1 ok, 2 skips b, a no_sync backward (not an iteration), 3 skips b, 4 ok, 5 skips b: the errors
// name iterations 2, 3 and 5 on the ranks that skipped; world 1 says nothing of other ranks.
TEST(UnusedParameterMessage, NamesTheIterationAndTheWorldAppropriateNoteAtWorlds1To4) {
  for (int world : {1, 2, 3, 4}) {
    for (bool only_last : {false, true}) {
      if (world == 1 && only_last) continue;
      std::vector<std::vector<std::string>> messages(world);
      dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
        nn::manual_seed(3);
        auto m = std::make_shared<SkippableLayer>();
        DistributedDataParallel ddp(m, borrow(pg), {});
        const bool skips = !only_last || rank == world - 1;
        for (int it : {1, 2, -1, 3, 4, 5}) {
          const bool skip = skips && (it == 2 || it == 3 || it == 5 || it == -1);
          messages[rank].push_back(step(ddp, *m, skip, it != -1));
        }
      });
      for (int r = 0; r < world; ++r) {
        const std::string where = "world " + std::to_string(world) + (only_last ? " (last rank skips)" : "") +
                                  " rank " + std::to_string(r) + ": ";
        const auto& ms = messages[r];
        ASSERT_EQ(ms.size(), 6u);
        EXPECT_EQ(ms[0], "") << where;
        EXPECT_EQ(ms[2], "") << where << "a no_sync backward raises nothing";
        EXPECT_EQ(ms[4], "") << where;
        if (only_last && r != world - 1) {
          for (auto& m : ms) EXPECT_EQ(m, "") << where << "this rank used b";
          continue;
        }
        for (auto [index, iteration] : {std::pair{1, 2}, std::pair{3, 3}, std::pair{5, 5}}) {
          const std::string& m = ms[index];
          ASSERT_FALSE(m.empty()) << where << "iteration " << iteration << " raised nothing";
          EXPECT_TRUE(
              has(m, "DDP finished this backward but 2 parameter(s) received no gradient in iteration " +
                         std::to_string(iteration) + " ("))
              << where << m;
          expect_common_parts(m, where);
          EXPECT_TRUE(has(m, "construct DistributedDataParallel with find_unused_parameters = true"))
              << where << m;
          if (world == 1) {
            EXPECT_FALSE(has(m, "other ranks")) << where << m;
            EXPECT_TRUE(has(m, "at any world size, 1 included")) << where << m;
          } else {
            EXPECT_TRUE(has(m, "The other ranks were kept in step")) << where << m;
          }
          EXPECT_EQ(m.rfind("rank " + std::to_string(r) + ": DDP finished", 0), 0u) << where << m;
        }
      }
    }
  }
}

// A program's own words (train's): its flag instead of the C++ option, its word for an iteration, and its
// numbers (number_iterations_from, e.g. after a resume at step 100), which later iterations count on from -
// also when renumbered midway.
TEST(UnusedParameterMessage, SpeaksTheCallersWordsAndNumbers) {
  for (int world : {1, 2}) {
    std::vector<std::vector<std::string>> messages(world);
    dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
      nn::manual_seed(3);
      auto m = std::make_shared<SkippableLayer>();
      DDPOptions o;
      o.advice.enable_find_unused_parameters = "run train with --find-unused-parameters";
      o.advice.iteration = "step";
      DistributedDataParallel ddp(m, borrow(pg), o);
      ddp.reducer().number_iterations_from(101);
      messages[rank].push_back(step(ddp, *m, true));
      messages[rank].push_back(step(ddp, *m, false));
      messages[rank].push_back(step(ddp, *m, true));
      ddp.reducer().number_iterations_from(7);
      messages[rank].push_back(step(ddp, *m, true));
    });
    for (int r = 0; r < world; ++r) {
      const std::string where = "world " + std::to_string(world) + " rank " + std::to_string(r) + ": ";
      const auto& ms = messages[r];
      EXPECT_EQ(ms[1], "") << where;
      for (auto [index, number] : {std::pair{0, 101}, std::pair{2, 103}, std::pair{3, 7}}) {
        const std::string& m = ms[index];
        EXPECT_TRUE(has(m, "received no gradient in step " + std::to_string(number) + " (")) << where << m;
        EXPECT_TRUE(has(m, "1. run train with --find-unused-parameters (")) << where << m;
        EXPECT_FALSE(has(m, "find_unused_parameters = true")) << where << m;
        EXPECT_FALSE(has(m, "construct DistributedDataParallel")) << where << m;
        EXPECT_FALSE(has(m, "iteration 1")) << where << m;
        expect_common_parts(m, where);
        EXPECT_EQ(has(m, "other ranks"), world > 1) << where << m;
      }
    }
  }
}

// static_graph's error numbers iterations the same way: the recorded iteration is the first synchronized one
// (its number, after number_iterations_from), and at world 1 it says nothing of other ranks; its fix 2 is in
// the caller's words when given.
TEST(UnusedParameterMessage, StaticGraphsErrorUsesTheSameNumberingAndWords) {
  for (int world : {1, 2, 3}) {
    for (bool worded : {false, true}) {
      std::vector<std::string> messages(world);
      dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
        nn::manual_seed(3);
        auto m = std::make_shared<SkippableLayer>();
        DDPOptions o;
        o.static_graph = true;
        if (worded) {
          o.advice.disable_static_graph = "run train without --static-graph";
          o.advice.iteration = "step";
        }
        DistributedDataParallel ddp(m, borrow(pg), o);
        if (worded) ddp.reducer().number_iterations_from(41);
        EXPECT_EQ(step(ddp, *m, false), "");
        EXPECT_EQ(step(ddp, *m, false), "");
        messages[rank] = step(ddp, *m, true);  // b's hooks do not fire: the graph changed
      });
      for (int r = 0; r < world; ++r) {
        const std::string where = "world " + std::to_string(world) + (worded ? " worded" : "") + " rank " +
                                  std::to_string(r) + ": ";
        const std::string& m = messages[r];
        ASSERT_TRUE(has(m, "Your training graph has changed")) << where << m;
        const std::string first = worded ? "step 41" : "iteration 1";
        EXPECT_TRUE(has(m, "since " + first + ",")) << where << m;
        EXPECT_TRUE(has(m, "received no gradient (" + first + ": 1 per backward)")) << where << m;
        EXPECT_TRUE(has(m, worded ? "2. run train without --static-graph"
                                  : "2. construct DistributedDataParallel without static_graph"))
            << where << m;
        EXPECT_FALSE(has(m, "find_unused_parameters")) << where << m;
        EXPECT_EQ(has(m, "other ranks"), world > 1) << where << m;
        EXPECT_EQ(has(m, "Ranks whose graph did not change"), world > 1) << where << m;
        EXPECT_EQ(m.rfind("rank " + std::to_string(r) + ": ", 0), 0u) << where << m;
      }
    }
  }
}
