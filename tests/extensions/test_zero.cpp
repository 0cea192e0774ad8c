// test_zero.cpp - ZeroRedundancyOptimizer: the greedy size partition; float64 equivalence with plain DDP +
// AdamW (and SGD) after 5 steps for worlds 1-4, each rank holding state only for its partition; a run
// checkpointed through consolidate_state_dict at one world size resumes at another and lands where an
// uninterrupted run lands; state() before consolidation is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace ddp::testing;

TEST(ZeroPartition, LargestFirstToTheLeastLoadedRank) {
  // 40 -> r0; 30 -> r1; 20 -> r1 (30 < 40); 10 -> r0 (40 < 50); 5 -> r0 (50 = 50: lower rank).
  EXPECT_EQ(optim::partition_parameters({10, 40, 30, 20, 5}, 2), (std::vector<int>{0, 0, 1, 1, 0}));
  // Equal sizes keep parameter order; more ranks than parameters leaves ranks empty.
  EXPECT_EQ(optim::partition_parameters({3, 3, 3}, 2), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(optim::partition_parameters({7, 9}, 4), (std::vector<int>{1, 0}));
  EXPECT_EQ(optim::partition_parameters({7, 9}, 1), (std::vector<int>{0, 0}));
}

namespace {

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

constexpr int64_t kGlobalRows = 12;  // divisible by worlds 1-4: the same global batch at every world size

Batch batch_of(int step) {
  Batch b;
  b.x = Tensor::randn({kGlobalRows, 12}, 500 + step, DType::F64);
  std::vector<int64_t> y(kGlobalRows);
  for (int64_t i = 0; i < kGlobalRows; ++i) y[i] = (i * 7 + step) % 5;
  b.y = Tensor::from_data(y, {kGlobalRows});
  return b;
}

struct Snapshot {
  std::vector<std::vector<double>> params;
  std::map<std::string, Tensor> optim;
  int64_t steps = 0;
};

enum class Opt { AdamW, SGD };

std::unique_ptr<optim::Optimizer> make_plain(Opt which, std::vector<nn::NamedTensor> ps) {
  if (which == Opt::AdamW)
    return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 0.02, .weight_decay = 0.1});
  return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

struct RunOut {
  Snapshot final;                      // rank 0's parameters (and, with zero, the consolidated state)
  std::vector<int64_t> state_bytes;    // per rank: optimizer-state bytes held
  std::vector<int64_t> state_entries;  // per rank: state tensors held
  int mismatched_ranks = 0;
};

// Trains the float64 MLP with DDP on `world` threads for steps [from, to), with ZeRO or the plain optimizer,
// optionally starting from `start` (parameters and full optimizer state).
RunOut run(int world, bool zero, Opt which, int from, int to, const Snapshot* start) {
  RunOut out;
  out.state_bytes.assign(world, 0);
  out.state_entries.assign(world, 0);
  std::vector<std::vector<std::vector<double>>> finals(world);
  std::mutex mu;
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(77);
    auto model = std::make_shared<models::MLP>(models::MLPConfig{12, {16, 8}, 5, DType::F64});
    if (start) {
      auto ps = model->parameters();
      for (size_t i = 0; i < ps.size(); ++i)
        ps[i].copy_from(Tensor::from_vector(start->params[i], ps[i].shape(), DType::F64));
    }
    DistributedDataParallel ddp(model, borrow(pg));
    std::unique_ptr<optim::Optimizer> opt;
    optim::ZeroRedundancyOptimizer* z = nullptr;
    if (zero) {
      auto zo = std::make_unique<optim::ZeroRedundancyOptimizer>(
          model->named_parameters(), borrow(pg),
          [which](std::vector<nn::NamedTensor> ps) { return make_plain(which, std::move(ps)); });
      z = zo.get();
      opt = std::move(zo);
    } else {
      opt = make_plain(which, model->named_parameters());
    }
    if (start) opt->load_state(start->optim, start->steps);
    const int64_t rows = kGlobalRows / world;
    for (int s = from; s < to; ++s) {
      Batch b = batch_of(s).rows(rank * rows, (rank + 1) * rows);
      opt->zero_grad();
      autograd::backward(ops::cross_entropy(ddp.forward(b.x), b.y));
      opt->step();
    }
    Snapshot snap;
    snap.params = snapshot_params(*model);
    snap.steps = opt->steps();
    if (z) {
      z->consolidate_state_dict(0);
      if (rank == 0) snap.optim = z->state();
    } else if (rank == 0) {
      snap.optim = opt->state();
    }
    std::lock_guard<std::mutex> g(mu);
    finals[rank] = snap.params;
    auto local = z ? z->local_state() : opt->state();
    out.state_entries[rank] = static_cast<int64_t>(local.size());
    for (auto& [k, t] : local) out.state_bytes[rank] += static_cast<int64_t>(t.nbytes());
    if (rank == 0) out.final = std::move(snap);
  });
  for (int r = 1; r < world; ++r)
    if (finals[r] != finals[0]) ++out.mismatched_ranks;
  return out;
}

double max_abs_difference(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double worst = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) worst = std::max(worst, std::fabs(a[i][j] - b[i][j]));
  return worst;
}

}  // namespace

class ZeroEquivalence : public ::testing::TestWithParam<int> {};

TEST_P(ZeroEquivalence, AdamWAfterFiveStepsEqualsPlainDDP) {
  const int world = GetParam();
  RunOut plain = run(world, false, Opt::AdamW, 0, 5, nullptr);
  RunOut zero = run(world, true, Opt::AdamW, 0, 5, nullptr);
  EXPECT_EQ(zero.mismatched_ranks, 0) << "ranks' parameters differ after the broadcasts";
  EXPECT_LT(max_abs_difference(zero.final.params, plain.final.params), 1e-12);
  // The consolidated state is the plain optimizer's state, entry for entry.
  ASSERT_EQ(zero.final.optim.size(), plain.final.optim.size());
  for (auto& [k, t] : plain.final.optim) {
    ASSERT_TRUE(zero.final.optim.count(k)) << k;
    EXPECT_LT(max_abs_difference({zero.final.optim.at(k).to_double_vector()}, {t.to_double_vector()}), 1e-12) << k;
  }
  // Sharded: the ranks' shards add up to the whole state, each holding only its partition.
  int64_t sum = 0, entries = 0;
  for (int r = 0; r < world; ++r) {
    sum += zero.state_bytes[r];
    entries += zero.state_entries[r];
    if (world > 1) {
      EXPECT_LT(zero.state_bytes[r], plain.state_bytes[0]) << "rank " << r << " holds everything";
    }
  }
  EXPECT_EQ(sum, plain.state_bytes[0]);
  EXPECT_EQ(entries, plain.state_entries[0]);
}

TEST_P(ZeroEquivalence, SGDWithMomentumEqualsPlainDDP) {
  const int world = GetParam();
  RunOut plain = run(world, false, Opt::SGD, 0, 5, nullptr);
  RunOut zero = run(world, true, Opt::SGD, 0, 5, nullptr);
  EXPECT_EQ(zero.mismatched_ranks, 0);
  EXPECT_LT(max_abs_difference(zero.final.params, plain.final.params), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroEquivalence, ::testing::Values(1, 2, 3, 4));

TEST(ZeroResume, ACheckpointFromOneWorldSizeResumesOnAnother) {
  RunOut whole = run(1, false, Opt::AdamW, 0, 5, nullptr);  // uninterrupted reference
  for (auto [w1, w2] : {std::pair{2, 3}, std::pair{4, 1}, std::pair{3, 2}}) {
    RunOut first = run(w1, true, Opt::AdamW, 0, 3, nullptr);
    ASSERT_EQ(first.final.steps, 3);
    RunOut second = run(w2, true, Opt::AdamW, 3, 5, &first.final);
    EXPECT_EQ(second.mismatched_ranks, 0);
    // Different world sizes average the same global batch in a different order: equal up to rounding.
    EXPECT_LT(max_relative_difference(second.final.params, whole.final.params), 1e-10)
        << "world " << w1 << " -> " << w2;
    EXPECT_EQ(second.final.steps, 5);
  }
}

TEST(ZeroResume, ResumingWithoutTheOptimizerStateGivesADifferentResult) {
  // The resume test above depends on the moments surviving the move: dropping them changes the result.
  RunOut whole = run(1, false, Opt::AdamW, 0, 5, nullptr);
  RunOut first = run(2, true, Opt::AdamW, 0, 3, nullptr);
  Snapshot params_only = first.final;
  params_only.optim.clear();
  RunOut second = run(3, true, Opt::AdamW, 3, 5, &params_only);
  EXPECT_GT(max_relative_difference(second.final.params, whole.final.params), 1e-6);
}

TEST(ZeroState, StateBeforeConsolidationIsAClearError) {
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(1);
    auto model = std::make_shared<models::MLP>(models::MLPConfig{4, {4}, 2, DType::F64});
    optim::ZeroRedundancyOptimizer z(model->named_parameters(), borrow(pg), [](std::vector<nn::NamedTensor> ps) {
      return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{});
    });
    try {
      z.state();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Call consolidate_state_dict(to) on every rank"), std::string::npos) << e.what();
    }
    z.consolidate_state_dict(1);
    if (rank == 1) {
      EXPECT_NO_THROW(z.state());
    } else {
      EXPECT_THROW(z.state(), Error);
    }
  });
}
