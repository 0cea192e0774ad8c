// test_join_space.cpp - Join over the space of DDP's options (issue 25): shm and Gloo, worlds 2 and 3, ranks
// with 0 batches, 1 batch and different counts, against {divide_by_initial_world_size true/false,
// static_graph, find_unused_parameters, gradient_as_bucket_view, no_sync accumulation, ZeRO, the comm hooks}.
// Every run must end on every rank with identical parameters equal (float64) to what Join's semantics give:
// at each step, the sum over the ranks still training of their gradients divided by the world size (or by
// the number of ranks still training), stepped by the optimizer (ZeRO: the same optimizer, sharded). Comm
// hooks are compared with the same hook in a run without Join where a rank past its data contributes zero
// gradients (what a joined rank's shadow hands the hook). SyncBatchNorm + Join is refused at construction.
// A short collective timeout makes a mismatch show in seconds instead of a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "models/branchy.h"
#include "models/cnn.h"
#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/join.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/local_world.h"
#include "runtime/nn/sync_batchnorm.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace ddp::testing;
using namespace std::chrono_literals;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
dist::ProcessGroupOptions short_timeout() {
  dist::ProcessGroupOptions o;
  o.timeout = 4s;
  return o;
}

// One combination of options: the DDP side and the reference read the same fields.
struct JoinCase {
  std::string backend = "shm";
  std::vector<int> batches;  // per rank
  bool divide_by_initial = true;
  bool static_graph = false;
  bool branchy = false;  // the model with data-dependent unused parameters (with find_unused_parameters)
  bool bucket_view = false;
  int accumulation = 1;  // micro-steps per step, all but the last under no_sync
  bool zero = false;
  std::string hook = "allreduce";
  // false: several buckets below shm's in-place threshold (32 KiB); true: one bucket above it (shm folds
  // the division into an Avg all-reduce there when the divisor is the world size).
  bool wide = false;
  std::string describe() const {
    std::string s = backend + (wide ? " wide" : " narrow") + " batches";
    for (int b : batches) s += " " + std::to_string(b);
    s += divide_by_initial ? " divide-initial" : " divide-active";
    if (static_graph) s += " static_graph";
    if (branchy) s += " find_unused";
    if (bucket_view) s += " bucket_view";
    if (accumulation > 1) s += " no_sync x" + std::to_string(accumulation);
    if (zero) s += " zero";
    return s + " hook " + hook;
  }
};

std::shared_ptr<nn::Module> make_model(const JoinCase& c) {
  const int64_t h = c.wide ? 64 : 8;  // wide: all parameters about 37 KB in float64, one bucket
  if (c.branchy) return std::make_shared<models::Branchy>(models::BranchyConfig{6, h, 3, DType::F64});
  return std::make_shared<models::MLP>(models::MLPConfig{6, {h, h - 1}, 3, DType::F64});
}
// The micro-batch of a rank; Branchy picks its expert from the sign of the mean of column 0, which differs
// between ranks and steps.
Batch micro_batch(int step, int micro, int rank) {
  const uint64_t seed = 7919 * static_cast<uint64_t>(step) + 101 * static_cast<uint64_t>(micro) + rank;
  std::vector<int64_t> y = {(step + rank) % 3, (step + micro) % 3};
  return Batch{Tensor::randn({2, 6}, seed, DType::F64), Tensor::from_data(y, {2})};
}
double lr_at(int step) { return 0.1 / (1 + step); }  // changes every step: a stale learning rate shows

Tensor micro_loss(const Tensor& logits, const Batch& b, int accumulation) {
  return ops::mul_scalar(ops::cross_entropy(logits, b.y), 1.0 / accumulation);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const JoinCase& c, nn::Module& model,
                                                 std::shared_ptr<dist::ProcessGroup> pg) {
  auto sgd = [](std::vector<nn::NamedTensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  };
  if (c.zero) return std::make_unique<optim::ZeroRedundancyOptimizer>(model.named_parameters(), pg, sgd);
  return sgd(model.named_parameters());
}

// One rank of a case: it trains its own number of batches with Join, then joins; returns its parameters.
// zero_past_end: no Join; every rank runs the longest count of steps, contributing zero gradients (loss * 0)
// past its own.
std::vector<std::vector<double>> train_rank(const JoinCase& c, int rank, dist::ProcessGroup& pg,
                                            bool zero_past_end) {
  const int steps = *std::max_element(c.batches.begin(), c.batches.end());
  nn::manual_seed(300 + rank);  // DDP's broadcast makes rank 0's initial parameters everyone's
  auto model = make_model(c);
  DDPOptions o;
  if (!c.wide) o.bucket_cap_mb = o.first_bucket_mb = 0.0003;  // several buckets
  o.find_unused_parameters = c.branchy;
  o.static_graph = c.static_graph;
  o.gradient_as_bucket_view = c.bucket_view;
  if (c.hook != "allreduce") {
    o.comm_hook = make_comm_hook(c.hook, 1, 2);
    o.rebuild_buckets = false;  // PowerSGD's state is per bucket: both runs keep one layout
  }
  DistributedDataParallel ddp(model, borrow(pg), o);
  auto opt = make_optimizer(c, *model, borrow(pg));
  std::unique_ptr<Join> join;
  if (!zero_past_end) {
    JoinOptions jo{.divide_by_initial_world_size = c.divide_by_initial,
                   .zero_grad_set_to_none = !c.bucket_view};
    if (auto* zero = dynamic_cast<optim::ZeroRedundancyOptimizer*>(opt.get())) jo.joinables.push_back(zero);
    join = std::make_unique<Join>(ddp, jo);
  }
  const int mine = zero_past_end ? steps : c.batches[rank];
  for (int step = 0; step < mine; ++step) {
    const bool past_end = step >= c.batches[rank];
    if (zero_past_end && !c.divide_by_initial) {  // what Join's activity all-reduce would set
      int active = 0;
      for (int b : c.batches) active += b > step;
      ddp.reducer().set_divide_factor(active);
    }
    opt->set_lr(lr_at(step));
    opt->zero_grad(/*set_to_none=*/!c.bucket_view);
    for (int micro = 0; micro < c.accumulation; ++micro) {
      Batch b = micro_batch(step, micro, rank);
      auto run = [&] {
        Tensor loss = micro_loss(ddp.forward(b.x), b, c.accumulation);
        autograd::backward(past_end ? ops::mul_scalar(loss, 0.0) : loss);
      };
      if (micro + 1 < c.accumulation) {
        auto guard = ddp.no_sync();
        run();
      } else {
        run();
      }
    }
    opt->step();
  }
  if (join) join->join();
  return snapshot_params(*model);
}

// Cases of one backend and world, one after another on the same groups: finals[case][rank].
std::vector<std::vector<std::vector<std::vector<double>>>> run_cases(const std::vector<JoinCase>& cases,
                                                                     bool zero_past_end = false) {
  const int world = static_cast<int>(cases.front().batches.size());
  std::vector<std::vector<std::vector<std::vector<double>>>> finals(
      cases.size(), std::vector<std::vector<std::vector<double>>>(world));
  dist::run_threads(
      world,
      [&](int rank, dist::ProcessGroup& pg) {
        for (size_t k = 0; k < cases.size(); ++k)
          finals[k][rank] = train_rank(cases[k], rank, pg, zero_past_end);
      },
      short_timeout(), cases.front().backend);
  return finals;
}

// One process: at each step, the ranks still training, each rank's accumulated gradient divided by the world
// size (or the active count), summed; a parameter no active rank used keeps its gradient as it was: none,
// or with gradient_as_bucket_view (zeroed in place, not set to none) zeros once it had one (so momentum
// moves it on).
std::vector<std::vector<double>> reference(const JoinCase& c) {
  const int world = static_cast<int>(c.batches.size());
  const int steps = *std::max_element(c.batches.begin(), c.batches.end());
  nn::manual_seed(300);
  auto model = make_model(c);
  optim::SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  auto ps = model->parameters();
  std::vector<uint8_t> had_grad(ps.size(), 0);
  for (int step = 0; step < steps; ++step) {
    int active = 0;
    for (int r = 0; r < world; ++r) active += c.batches[r] > step;
    const double inv = 1.0 / (c.divide_by_initial ? world : active);
    std::vector<Tensor> sum(ps.size());
    for (int r = 0; r < world; ++r) {
      if (c.batches[r] <= step) continue;
      model->zero_grad();
      for (int micro = 0; micro < c.accumulation; ++micro) {
        Batch b = micro_batch(step, micro, r);
        autograd::backward(micro_loss(model->forward(b.x), b, c.accumulation));
      }
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!ps[i].grad().defined()) continue;
        Tensor g = ops::mul_scalar(ps[i].grad(), inv);
        sum[i] = sum[i].defined() ? ops::add(sum[i], g) : g;
      }
    }
    model->zero_grad();
    for (size_t i = 0; i < ps.size(); ++i) {
      if (!sum[i].defined() && had_grad[i] && c.bucket_view) sum[i] = Tensor::zeros_like(ps[i]);
      if (sum[i].defined()) ps[i].set_grad(sum[i]);
      had_grad[i] |= sum[i].defined() ? 1 : 0;
    }
    opt.set_lr(lr_at(step));
    opt.step();
  }
  return snapshot_params(*model);
}

void expect_identical_and_equal(const std::vector<std::vector<std::vector<double>>>& finals,
                                const std::vector<std::vector<double>>& expected, double tolerance,
                                const std::string& what) {
  for (size_t r = 1; r < finals.size(); ++r) EXPECT_TRUE(finals[r] == finals[0]) << what << ": rank " << r;
  EXPECT_LT(max_relative_difference(finals[0], expected), tolerance) << what;
}

// The batch counts of the ranks: some with 0, some with 1, all different, the last rank the longest or not.
std::vector<std::vector<int>> patterns(int world) {
  if (world == 2) return {{0, 2}, {3, 1}};
  return {{0, 2, 3}, {3, 0, 1}, {2, 2, 1}};
}

// Every backend, world and batch pattern with `set`'s options; narrow and wide buckets on shm (Gloo has no
// threshold).
void for_each_case(const std::function<void(JoinCase&)>& set) {
  for (const char* backend : {"shm", "gloo"})
    for (int world : {2, 3}) {
      std::vector<JoinCase> cases;
      for (const auto& batches : patterns(world))
        for (bool wide : {false, true}) {
          if (wide && std::string(backend) != "shm") continue;
          JoinCase c;
          c.backend = backend;
          c.batches = batches;
          c.wide = wide;
          set(c);
          cases.push_back(c);
        }
      auto finals = run_cases(cases);
      for (size_t k = 0; k < cases.size(); ++k)
        expect_identical_and_equal(finals[k], reference(cases[k]), 1e-10, cases[k].describe());
    }
}
}  // namespace

TEST(JoinSpace, DivideByInitialWorldSize) {
  for_each_case([](JoinCase&) {});
}

// Issue 25 item 4: a joined rank's divisor was stale (never set by a forward), so on shm it all-reduced with
// Avg where the ranks still training used Sum: a collective mismatch.
TEST(JoinSpace, DivideByActiveRanks) {
  for_each_case([](JoinCase& c) { c.divide_by_initial = false; });
}

// Issue 25 item 5: a rank with no batch at all never ran static_graph's first backward, whose used-map
// all-reduce its shadow did not issue.
TEST(JoinSpace, StaticGraph) {
  for (bool divide : {true, false})
    for_each_case([divide](JoinCase& c) {
      c.static_graph = true;
      c.divide_by_initial = divide;
    });
}

TEST(JoinSpace, FindUnusedParametersGradientAsBucketViewAndNoSync) {
  for (int variant = 0; variant < 4; ++variant)
    for_each_case([variant](JoinCase& c) {
      c.branchy = variant == 0 || variant == 3;
      c.bucket_view = variant == 1 || variant == 3;
      c.accumulation = variant >= 2 ? 3 : 1;
      c.divide_by_initial = variant != 3;
    });
}

// Issue 25 item 7: the ZeRO step's broadcasts had no shadow on a joined rank. Registered with Join, the
// joined rank steps its shard with the averaged gradients and the active ranks' learning rate.
TEST(JoinSpace, ZeroRedundancyOptimizer) {
  for (int variant = 0; variant < 4; ++variant)
    for_each_case([variant](JoinCase& c) {
      c.zero = true;
      c.divide_by_initial = variant % 2 == 0;
      c.bucket_view = variant == 1;              // zeroed in place: a parameter no rank used steps with zeros
      c.branchy = variant == 1 || variant == 2;  // find_unused_parameters (set to none: nothing to step)
      c.static_graph = variant == 3;
    });
}

// The comm hook runs on the joined rank's zero buckets, so a Join run equals a run without Join in which a
// rank past its data contributes zero gradients (PowerSGD: from iteration 2, with error feedback) - with the
// same divisor (divide_by_initial_world_size = false: the reference run sets the active count itself).
TEST(JoinSpace, CommHooksSeeZeroBucketsFromJoinedRanks) {
  for (const char* backend : {"shm", "gloo"})
    for (int world : {2, 3}) {
      std::vector<JoinCase> cases;
      for (const char* hook : {"bf16", "powersgd"})
        for (const auto& batches : patterns(world))
          for (bool divide : {true, false}) {
            JoinCase c;
            c.backend = backend;
            c.batches = batches;
            c.hook = hook;
            c.wide = world == 3;
            c.divide_by_initial = divide;
            cases.push_back(c);
          }
      auto joined = run_cases(cases);
      auto zeros = run_cases(cases, /*zero_past_end=*/true);
      for (size_t k = 0; k < cases.size(); ++k)
        expect_identical_and_equal(joined[k], zeros[k][0], 1e-12, cases[k].describe());
    }
}

// SyncBatchNorm all-gathers statistics in every training forward, which a joined rank (without a batch)
// cannot shadow: refused when the Join is built, on every rank, with the reason.
TEST(JoinSpace, SyncBatchNormIsRefusedAtConstruction) {
  for (const char* backend : {"shm", "gloo"})
    for (int world : {2, 3}) {
      std::vector<std::string> errors(world);
      dist::run_threads(
          world,
          [&](int rank, dist::ProcessGroup& pg) {
            auto model = nn::convert_sync_batchnorm(
                std::make_shared<models::CNN>(models::CNNConfig{1, 3, 4, 8, 3, DType::F64}), borrow(pg));
            DistributedDataParallel ddp(model, borrow(pg), {});
            try {
              Join join(ddp);
            } catch (const Error& e) {
              errors[rank] = e.what();
            }
          },
          short_timeout(), backend);
      for (int r = 0; r < world; ++r) {
        EXPECT_NE(errors[r].find("SyncBatchNorm"), std::string::npos)
            << backend << " rank " << r << ": " << errors[r];
        EXPECT_NE(errors[r].find("joined rank"), std::string::npos) << errors[r];
      }
    }
}

// A ZeroRedundancyOptimizer over the DDP's group that the Join does not shadow would leave the ranks still
// training waiting in its broadcasts: refused on every rank, whichever of the two is built first.
TEST(JoinSpace, UnregisteredZeroRedundancyOptimizerIsRefusedAtConstruction) {
  for (const char* backend : {"shm", "gloo"})
    for (int zero_first = 0; zero_first < 2; ++zero_first) {
      std::vector<std::string> errors(2);
      dist::run_threads(
          2,
          [&](int rank, dist::ProcessGroup& pg) {
            auto model = make_model(JoinCase{});
            DistributedDataParallel ddp(model, borrow(pg), {});
            auto sgd = [](std::vector<nn::NamedTensor> p) {
              return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.1});
            };
            try {
              if (zero_first) {
                optim::ZeroRedundancyOptimizer zero(model->named_parameters(), borrow(pg), sgd);
                Join join(ddp);
              } else {
                Join join(ddp);
                optim::ZeroRedundancyOptimizer zero(model->named_parameters(), borrow(pg), sgd);
              }
            } catch (const Error& e) {
              errors[rank] = e.what();
            }
          },
          short_timeout(), backend);
      for (int r = 0; r < 2; ++r) {
        EXPECT_NE(errors[r].find("ZeroRedundancyOptimizer"), std::string::npos) << r << ": " << errors[r];
        EXPECT_NE(errors[r].find(".joinables = {&"), std::string::npos) << errors[r];
      }
    }
}
