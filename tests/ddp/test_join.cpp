// test_join.cpp - uneven inputs (issue 10): ranks with different numbers of batches. With ddp::Join they all
// finish, with identical parameters equal in float64 to one process applying the same averaged gradients
// (divided by the initial world size, or by the ranks still training); BatchNorm buffers, unused parameters
// and no_sync accumulation are shadowed too. Without Join every rank gets a clear error within the collective
// timeout instead of an abort or a hang.
#include <gtest/gtest.h>

#include <chrono>

#include "models/branchy.h"
#include "models/cnn.h"
#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/join.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/distributed/local_world.h"
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
  o.timeout = 5s;
  o.debug_collectives = false;
  return o;
}
std::shared_ptr<nn::Module> make_mlp() {
  return std::make_shared<models::MLP>(models::MLPConfig{10, {12, 12}, 4, DType::F64});
}
Batch batch_of(int step, int rank) {
  std::vector<int64_t> y = {(step + rank) % 4, (step * 3 + rank) % 4, 2};
  return Batch{Tensor::randn({3, 10}, 1000 * step + rank, DType::F64), Tensor::from_data(y, {3})};
}

struct JoinRun {
  std::vector<std::vector<std::vector<double>>> finals;
  std::vector<int64_t> shadowed;
  std::vector<int> last_joiner;
};

// Each rank trains on its own number of batches, then joins.
JoinRun train_with_join(const std::vector<int>& batches, bool divide_by_initial) {
  const int world = static_cast<int>(batches.size());
  JoinRun out{std::vector<std::vector<std::vector<double>>>(world), std::vector<int64_t>(world),
              std::vector<int>(world)};
  dist::run_threads(
      world,
      [&](int rank, dist::ProcessGroup& pg) {
        nn::manual_seed(1000 + rank);
        auto model = make_mlp();
        DDPOptions o;
        o.bucket_cap_mb = o.first_bucket_mb = 0.0005;  // several buckets
        DistributedDataParallel ddp(model, borrow(pg), o);
        optim::SGD opt(model->named_parameters(), {.lr = 0.1});
        Join join(ddp, {.divide_by_initial_world_size = divide_by_initial});
        for (int step = 0; step < batches[rank]; ++step) {
          Batch b = batch_of(step, rank);
          opt.zero_grad();
          autograd::backward(ops::cross_entropy(ddp.forward(b.x), b.y));
          opt.step();
        }
        join.join();
        out.shadowed[rank] = join.shadowed_iterations();
        out.last_joiner[rank] = join.last_joiner();
        out.finals[rank] = snapshot_params(*model);
      },
      short_timeout());
  return out;
}

// One process: at each step, the sum of the active ranks' gradients divided by the world size (or by the
// number of active ranks).
std::vector<std::vector<double>> join_reference(const std::vector<int>& batches, bool divide_by_initial) {
  nn::manual_seed(1000);
  auto model = make_mlp();
  optim::SGD opt(model->named_parameters(), {.lr = 0.1});
  const int world = static_cast<int>(batches.size());
  const int steps = *std::max_element(batches.begin(), batches.end());
  for (int step = 0; step < steps; ++step) {
    int active = 0;
    for (int r = 0; r < world; ++r) active += batches[r] > step;
    const double divisor = divide_by_initial ? world : active;
    opt.zero_grad();
    std::vector<Tensor> sum;
    for (int r = 0; r < world; ++r) {
      if (batches[r] <= step) continue;
      model->zero_grad();
      Batch b = batch_of(step, r);
      autograd::backward(ops::cross_entropy(model->forward(b.x), b.y));
      auto ps = model->parameters();
      for (size_t i = 0; i < ps.size(); ++i) {
        Tensor g =
            ops::mul_scalar(ps[i].grad(), 1.0 / divisor);  // as DDP: each rank's gradient divided, summed
        if (sum.size() <= i)
          sum.push_back(g);
        else
          sum[i] = ops::add(sum[i], g);
      }
    }
    auto ps = model->parameters();
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(sum[i]);
    opt.step();
  }
  return snapshot_params(*model);
}
}  // namespace

TEST(Join, UnevenBatchesEndIdenticalAndEqualTheAveragedSingleProcessRun) {
  const std::vector<int> batches = {2, 5, 3};
  JoinRun run = train_with_join(batches, true);
  EXPECT_TRUE(run.finals[0] == run.finals[1] && run.finals[1] == run.finals[2]) << "ranks differ after Join";
  EXPECT_LT(max_relative_difference(run.finals[0], join_reference(batches, true)), 1e-12);
  EXPECT_EQ(run.shadowed, (std::vector<int64_t>{3, 0, 2}));
  EXPECT_EQ(run.last_joiner, (std::vector<int>{0, 1, 0}));
}

TEST(Join, DivideByActiveRanksWhenAsked) {
  const std::vector<int> batches = {4, 1};
  JoinRun run = train_with_join(batches, false);
  EXPECT_TRUE(run.finals[0] == run.finals[1]);
  EXPECT_LT(max_relative_difference(run.finals[0], join_reference(batches, false)), 1e-12);
  EXPECT_GT(max_relative_difference(run.finals[0], join_reference(batches, true)), 1e-6)
      << "the divisor made no difference: the test cannot tell the modes apart";
}

TEST(Join, BuffersUnusedParametersAndNoSyncAreShadowed) {
  // CNN: BatchNorm buffers broadcast before each forward; Branchy: find_unused_parameters and its used-map;
  // two micro-steps per step, the first under no_sync. A rank with no batch at all joins at once.
  for (int which = 0; which < 2; ++which) {
    std::vector<std::vector<std::vector<double>>> params(3), buffers(3);
    const std::vector<int> batches = {3, 0, 1};
    dist::run_threads(
        3,
        [&](int rank, dist::ProcessGroup& pg) {
          nn::manual_seed(5 + rank);
          std::shared_ptr<nn::Module> model;
          if (which == 0)
            model = std::make_shared<models::CNN>(models::CNNConfig{1, 3, 4, 8, 3, DType::F64});
          else
            model = std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64});
          DDPOptions o;
          o.find_unused_parameters = which == 1;
          o.bucket_cap_mb = o.first_bucket_mb = 0.0002;
          DistributedDataParallel ddp(model, borrow(pg), o);
          optim::SGD opt(model->named_parameters(), {.lr = 0.05, .momentum = 0.9});
          Join join(ddp);
          for (int step = 0; step < batches[rank]; ++step) {
            opt.zero_grad();
            for (int micro = 0; micro < 2; ++micro) {
              Tensor x = which == 0 ? Tensor::randn({2, 1, 8, 8}, 10 * step + micro + 100 * rank, DType::F64)
                                    : Tensor::randn({2, 6}, 10 * step + micro + 100 * rank, DType::F64);
              auto y = Tensor::from_data<int64_t>({step % 3, 1}, {2});
              auto run = [&] { autograd::backward(ops::cross_entropy(ddp.forward(x), y) * 0.5); };
              if (micro == 0) {
                auto guard = ddp.no_sync();
                run();
              } else {
                run();
              }
            }
            opt.step();
          }
          join.join();
          params[rank] = snapshot_params(*model);
          buffers[rank] = snapshot_buffers(*model);
        },
        short_timeout());
    EXPECT_TRUE(params[0] == params[1] && params[0] == params[2]) << "model " << which;
    EXPECT_TRUE(buffers[0] == buffers[1] && buffers[0] == buffers[2]) << "model " << which;
  }
}

// Without Join: rank 1 runs out after 2 steps and all-reduces its loss for the log while rank 0 still
// all-reduces gradient buckets. Both ranks get a clear error naming the mismatch - no abort, no hang.
TEST(Join, WithoutJoinUnevenStepsGiveAClearErrorOnEveryRank) {
  std::vector<std::string> errors(2);
  dist::run_threads(
      2,
      [&](int rank, dist::ProcessGroup& pg) {
        nn::manual_seed(1);
        auto model = make_mlp();
        DistributedDataParallel ddp(model, borrow(pg), {});
        optim::SGD opt(model->named_parameters(), {.lr = 0.1});
        try {
          for (int step = 0; step < (rank == 0 ? 5 : 2); ++step) {
            Batch b = batch_of(step, rank);
            opt.zero_grad();
            autograd::backward(ops::cross_entropy(ddp.forward(b.x), b.y));
            opt.step();
          }
          Tensor loss = Tensor::from_data<double>({1.0}, {1});
          host_allreduce(pg, loss);
        } catch (const Error& e) {
          errors[rank] = e.what();
        }
      },
      short_timeout());
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("collective mismatch"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("allreduce (1 x float64, sum)"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("Join"), std::string::npos) << errors[r];
  }
}
