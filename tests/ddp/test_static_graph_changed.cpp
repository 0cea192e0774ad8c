// test_static_graph_changed.cpp - DDP static_graph when the graph changes after all (docs/ddp-step.md,
// "static_graph"): a parameter unused in iteration 1 that later gets a gradient, one whose hook fires more
// often than in iteration 1 (a checkpointed block's nested backward), one that fires less often. The changed
// rank records it, still issues every collective of the backward and raises at its end; ranks whose graph did
// not change see nothing. Every rank ends the iteration with the same .grad, and a program that catches the
// error, steps and continues gets the right gradients (the mean of the ranks' local ones), equal on all
// ranks. Over worlds 1-4 (all ranks changed, or only the first or the last), one parameter per bucket and one
// bucket, and the three gradient modes (copy, bucket view, bucket view zeroed in place).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "models/branchy.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/node.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/checkpoint_block.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
// One gradient per parameter, flattened; empty: none.
using Grads = std::vector<std::vector<double>>;

Grads grads_of(const nn::Module& m) {
  Grads g;
  for (auto& p : m.named_parameters())
    g.push_back(p.tensor.grad().defined() ? p.tensor.grad().to_double_vector() : std::vector<double>{});
  return g;
}

// A model whose graph a flag changes, the batch of a rank, what the changed rank's error must name, and
// the parameters (name prefixes) for which a changed rank contributes zeros to the average: a late gradient
// is left out, a missing one counts as zeros. Unknown (nullopt) where which of a parameter's two gradients
// came late depends on the engine's order.
struct Scenario {
  std::string name;
  std::function<std::shared_ptr<nn::Module>()> make;
  std::function<void(nn::Module&, bool changed)> set_graph;
  std::function<Tensor(int rank, int step, bool changed)> input;
  std::vector<std::string> named;
  std::optional<std::vector<std::string>> zeroed;
};

std::vector<Scenario> scenarios() {
  std::vector<Scenario> out;
  // Iteration 1 takes expert0 on every rank, or expert r % 2 on rank r; the changed graph takes the other
  // expert (unused on this rank in iteration 1, so its gradient is unexpected) and leaves its own without
  // one.
  for (bool expert_per_rank : {false, true})
    out.push_back({expert_per_rank ? "branchy, expert r % 2 on rank r: the other one"
                                   : "branchy: expert1 instead of expert0",
                   [] {
                     nn::manual_seed(3);
                     return std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64});
                   },
                   [](nn::Module&, bool) {},
                   [expert_per_rank](int rank, int step, bool changed) {
                     const int expert = (expert_per_rank ? rank % 2 : 0) ^ (changed ? 1 : 0);
                     Tensor x = Tensor::randn({4, 6}, 70 + 10 * step + rank, DType::F64);
                     double* d = x.data<double>();
                     for (int i = 0; i < 4; ++i)
                       d[i * 6] = (expert == 0 ? 1.0 : -1.0) * (0.5 + std::fabs(d[i * 6]));
                     return x;
                   },
                   {"expert1", "expert0", "did not use it in iteration 1", "received no gradient"},
                   std::vector<std::string>{"expert0.", "expert1."}});
  // w inside a block and after it: checkpointing the block fires w's hook twice per backward (nested +
  // outer).
  for (bool checkpointed_first : {false, true})
    out.push_back({checkpointed_first ? "shared weight: checkpointed, then not (w fires less often)"
                                      : "shared weight: plain, then checkpointed (w fires more often)",
                   [] {
                     nn::manual_seed(9);
                     // w inside the block and again after it: checkpointing the block fires w's hook twice
                     // per backward (the nested backward, then the outer one); b inside, v after it.
                     return std::make_shared<SharedWeightNet>(Placement{false, true, 1}, false, DType::F64);
                   },
                   [checkpointed_first](nn::Module& m, bool changed) {
                     dynamic_cast<SharedWeightNet&>(m).ckpt = checkpointed_first != changed;
                   },
                   [](int rank, int step, bool) {
                     return Tensor::randn({3, 5}, 300 + 10 * step + rank, DType::F64);
                   },
                   {"w", checkpointed_first ? "fewer" : "more"},
                   checkpointed_first ? std::optional<std::vector<std::string>>{{"w"}} : std::nullopt});
  return out;
}

struct GradMode {
  const char* name;
  bool view;
  bool set_to_none;
};
constexpr GradMode kGradModes[] = {
    {"copy", false, true}, {"bucket view", true, true}, {"bucket view zeroed in place", true, false}};
// One parameter per bucket, one bucket.
constexpr double kBucketCapsMb[] = {1e-6, 25.0};

constexpr int kSteps = 5;
bool graph_changed_at(int step) { return step == 2 || step == 3; }

struct RankRecord {
  std::vector<Grads> ddp;           // per step: .grad after the synchronized backward (and the catch)
  std::vector<Grads> local;         // per step: this rank's own gradient (a replica that never checkpoints)
  std::vector<std::string> errors;  // per step: the error's text, "" for none
  std::vector<std::vector<double>> params;  // after the last step
  std::vector<std::string> names;           // of the parameters
};

// Trains kSteps on `world` thread ranks; ranks in `changing` take the changed graph at graph_changed_at
// steps. Returns per configuration (scenario x mode x cap, in that order) each rank's record.
std::vector<std::vector<RankRecord>> train(int world, const std::vector<int>& changing) {
  const auto all = scenarios();
  const size_t configs = all.size() * std::size(kGradModes) * std::size(kBucketCapsMb);
  std::vector<std::vector<RankRecord>> out(configs, std::vector<RankRecord>(static_cast<size_t>(world)));
  dist::ProcessGroupOptions pgo;
  pgo.timeout = std::chrono::seconds(10);  // a rank out of step fails fast instead of hanging
  dist::run_threads(
      world,
      [&](int rank, dist::ProcessGroup& pg) {
        const bool changes = std::find(changing.begin(), changing.end(), rank) != changing.end();
        size_t c = 0;
        for (const Scenario& sc : all)
          for (const GradMode& mode : kGradModes)
            for (double cap : kBucketCapsMb) {
              RankRecord& rec = out[c++][static_cast<size_t>(rank)];
              auto model = sc.make();
              auto replica =
                  sc.make();  // this rank's local gradient, on the plain graph (never checkpointed)
              DDPOptions o;
              o.static_graph = true;
              o.gradient_as_bucket_view = mode.view;
              o.first_bucket_mb = o.bucket_cap_mb = cap;
              DistributedDataParallel ddp(
                  model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg), o);
              optim::SGD sgd(model->named_parameters(), {.lr = 0.1});
              for (int s = 0; s < kSteps; ++s) {
                const bool changed = changes && graph_changed_at(s);
                sc.set_graph(*model, changed);
                Tensor x = sc.input(rank, s, changed);
                Tensor y = Tensor::from_data<int64_t>({0, 1, 2}, {3});
                if (x.size(0) == 4)
                  y = Tensor::from_data<int64_t>({0, 1, 2, static_cast<int64_t>(s % 3)}, {4});
                {
                  auto rp = replica->named_parameters();
                  auto mp = model->named_parameters();
                  for (size_t i = 0; i < rp.size(); ++i) {
                    rp[i].tensor.copy_from(mp[i].tensor);
                    rp[i].tensor.set_grad(Tensor());
                  }
                  autograd::backward(ops::cross_entropy(replica->forward(x), y));
                  rec.local.push_back(grads_of(*replica));
                }
                sgd.zero_grad(mode.set_to_none);
                std::string error;
                try {
                  autograd::backward(ops::cross_entropy(ddp.forward(x), y));
                } catch (const Error& e) {
                  error = e.what();
                  if (error.empty()) error = "(empty error)";
                }
                rec.errors.push_back(error);
                rec.ddp.push_back(grads_of(*model));
                sgd.step();
              }
              sc.set_graph(*model, false);
              rec.params = snapshot_params(*model);
              for (auto& p : model->named_parameters()) rec.names.push_back(p.name);
            }
      },
      pgo);
  return out;
}

std::string config_name(size_t c) {
  const auto all = scenarios();
  const size_t caps = std::size(kBucketCapsMb), modes = std::size(kGradModes);
  return all[c / (caps * modes)].name + ", " + kGradModes[(c / caps) % modes].name + ", bucket cap " +
         std::to_string(kBucketCapsMb[c % caps]) + " MB";
}

// The mean of the ranks' local gradients (none counts as zeros), with zeros from the ranks where
// `zero(rank, param)`. static_graph's rule for which parameters have a gradient at all: those some rank used
// in iteration 1 (the others keep grad none).
Grads mean_of(const std::vector<RankRecord>& ranks, int step,
              const std::function<bool(size_t rank, size_t param)>& zero = {}) {
  Grads mean(ranks[0].local[0].size());
  for (size_t p = 0; p < mean.size(); ++p)
    for (const RankRecord& r : ranks)
      if (!r.local[0][p].empty()) mean[p].assign(r.local[0][p].size(), 0.0);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Grads& g = ranks[r].local[static_cast<size_t>(step)];
    for (size_t p = 0; p < g.size(); ++p) {
      if (g[p].empty() || mean[p].empty() || (zero && zero(r, p))) continue;
      for (size_t i = 0; i < g[p].size(); ++i) mean[p][i] += g[p][i] / static_cast<double>(ranks.size());
    }
  }
  return mean;
}

void expect_close(const Grads& got, const Grads& want, const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t p = 0; p < got.size(); ++p) {
    ASSERT_EQ(got[p].empty(), want[p].empty()) << where << ": parameter " << p << " defined on one side only";
    for (size_t i = 0; i < got[p].size(); ++i)
      ASSERT_NEAR(got[p][i], want[p][i], 1e-12 * std::max(1.0, std::fabs(want[p][i])))
          << where << ": parameter " << p << " element " << i;
  }
}

void check(int world, const std::vector<int>& changing) {
  const auto all = scenarios();
  auto out = train(world, changing);
  for (size_t c = 0; c < out.size(); ++c) {
    const std::string cfg = "world " + std::to_string(world) + ", " + config_name(c);
    const Scenario& sc = all[c / (std::size(kBucketCapsMb) * std::size(kGradModes))];
    const std::vector<RankRecord>& ranks = out[c];
    for (int s = 0; s < kSteps; ++s) {
      const std::string where = cfg + ", step " + std::to_string(s);
      for (int r = 0; r < world; ++r) {
        const std::string& err = ranks[static_cast<size_t>(r)].errors[static_cast<size_t>(s)];
        const bool changes = std::find(changing.begin(), changing.end(), r) != changing.end();
        if (!(changes && graph_changed_at(s))) {
          EXPECT_EQ(err, "") << where << ": rank " << r << " (graph unchanged) raised";
          continue;
        }
        ASSERT_NE(err, "") << where << ": rank " << r << " changed its graph and raised nothing";
        for (const std::string& want : sc.named)
          EXPECT_NE(err.find(want), std::string::npos) << where << ": " << err;
        EXPECT_NE(err.find("Your training graph has changed"), std::string::npos) << where << ": " << err;
        EXPECT_NE(err.find("without static_graph"), std::string::npos) << where << ": " << err;
        EXPECT_EQ(err.find("find_unused_parameters"), std::string::npos)
            << where << ": suggests what static_graph turns off: " << err;
        EXPECT_NE(err.find("rank " + std::to_string(r)), std::string::npos) << where << ": " << err;
      }
      // Every iteration, the changed one too: the same .grad on every rank.
      for (int r = 1; r < world; ++r)
        ASSERT_EQ(ranks[static_cast<size_t>(r)].ddp[static_cast<size_t>(s)],
                  ranks[0].ddp[static_cast<size_t>(s)])
            << where << ": rank " << r << "'s gradients differ from rank 0's";
      // Unchanged iterations, before and after the changed ones: the mean of the local gradients. Changed
      // ones: the changed ranks' late or missing gradients count as zeros.
      if (s >= 1 && !graph_changed_at(s))
        expect_close(ranks[0].ddp[static_cast<size_t>(s)], mean_of(ranks, s), where);
      if (graph_changed_at(s) && sc.zeroed) {
        auto zero = [&](size_t r, size_t p) {
          if (std::find(changing.begin(), changing.end(), static_cast<int>(r)) == changing.end())
            return false;
          for (const std::string& prefix : *sc.zeroed)
            if (ranks[r].names[p].rfind(prefix, 0) == 0) return true;
          return false;
        };
        expect_close(ranks[0].ddp[static_cast<size_t>(s)], mean_of(ranks, s, zero), where + " (changed)");
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (int r = 1; r < world; ++r)
      ASSERT_EQ(ranks[static_cast<size_t>(r)].params, ranks[0].params)
          << cfg << ": rank " << r << "'s parameters differ";
  }
}
}  // namespace

TEST(StaticGraphChanged, WhenEveryRankChangesEachRaisesAtTheEndOfBackwardAndTrainingContinuesInStep) {
  for (int world : {1, 2, 3}) {
    std::vector<int> everyone;
    for (int r = 0; r < world; ++r) everyone.push_back(r);
    check(world, everyone);
    if (HasFatalFailure()) return;
  }
}

TEST(StaticGraphChanged, WhenOneRankChangesItAloneRaisesNoRankHangsAndTheRanksStayInStep) {
  // The first rank, the last, both at world 2.
  for (auto [world, changing] : {std::pair{2, 0}, std::pair{2, 1}, std::pair{3, 2}, std::pair{4, 0}}) {
    SCOPED_TRACE("world " + std::to_string(world) + ", only rank " + std::to_string(changing) + " changes");
    check(world, {changing});
    if (HasFatalFailure()) return;
  }
}
