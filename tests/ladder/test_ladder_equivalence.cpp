// test_ladder_equivalence.cpp - each rung of the ladder (examples/ladder, docs/ladder.md) trains exactly like
// one process on the whole batch: float64, relative 1e-10 after 5 SGD-with-momentum steps, every rank bitwise
// the same (the pattern and reference of tests/ddp/test_equivalence.cpp, tests/support/ddp_test_util.h),
// worlds 1-3 over the gloo and shm thread groups, per-rank batches of 1-3 rows, bucket caps around the
// parameters' sizes. Also: the rungs equal each other; each step issues the all-reduces its idea says (count
// and bytes); rung 4's buckets are the reducer's; a parameter without a gradient is a clear error on every
// rank of rungs 1-4, not a hang.
#include <gtest/gtest.h>

#include <random>

#include "examples/ladder/ladder.h"
#include "models/mlp.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/elementwise.h"
#include "runtime/sim/bucket_assignment.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
namespace dt = ddp::testing;

namespace {

// 6 parameters: 16x12, 16, 16x16, 16, 5x16, 5 - 565 float64 elements, 4520 bytes.
const std::vector<size_t> kParamBytes = {16 * 12 * 8, 16 * 8, 16 * 16 * 8, 16 * 8, 5 * 16 * 8, 5 * 8};
constexpr double kMiB = 1024.0 * 1024.0;

dt::ModelFactory mlp_factory() {
  return [] { return std::make_shared<models::MLP>(models::MLPConfig{12, {16, 16}, 5, DType::F64}); };
}
dt::BatchFn mlp_data() {  // the data of tests/ddp/test_equivalence.cpp
  return [](int step, int64_t rows) {
    dt::Batch b;
    b.x = Tensor::randn({rows, 12}, 100 + step, DType::F64);
    std::vector<int64_t> y(rows);
    for (int64_t i = 0; i < rows; ++i) y[i] = (i * 7 + step) % 5;
    b.y = Tensor::from_data(y, {rows});
    return b;
  };
}

ladder::RungFactory rung(int n) {
  switch (n) {
    case 1:
      return ladder::make_rung1;
    case 2:
      return ladder::make_rung2;
    case 3:
      return ladder::make_rung3;
    case 4:
      return ladder::make_rung4;
    default:
      return ladder::make_rung5;
  }
}

struct LadderRun {
  int rung = 1;
  int world = 2;
  int64_t per_rank = 2;
  int steps = 5;
  double bucket_mb = 1000 / kMiB;  // a cap that splits the MLP's gradients into 3 buckets
  std::string backend = "gloo";
};
struct Outcome {
  std::vector<std::vector<std::vector<double>>> params;  // per rank
  std::vector<std::vector<ladder::StepResult>> steps;    // per rank
};

Outcome train_rung(const LadderRun& run, const dt::ModelFactory& make = mlp_factory()) {
  Outcome out;
  out.params.resize(run.world);
  out.steps.resize(run.world);
  dist::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(30);
  const dt::BatchFn data = mlp_data();
  dist::run_threads(
      run.world,
      [&](int rank, dist::ProcessGroup& pg) {
        nn::manual_seed(1000 + rank);  // different initial weights: the rung must start from rank 0's
        auto model = make();
        auto group = std::make_shared<ladder::CountingGroup>(
            std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg));
        std::unique_ptr<ladder::GradientSync> sync = rung(run.rung)({model, group, run.bucket_mb});
        optim::SGD opt(model->named_parameters(),
                       {.lr = 0.1, .momentum = 0.9});  // train_reference's optimizer
        for (int step = 0; step < run.steps; ++step) {
          dt::Batch full = data(step, run.per_rank * run.world);
          ladder::Batch mine =
              ladder::Batch{full.x, full.y}.rows(rank * run.per_rank, (rank + 1) * run.per_rank);
          out.steps[rank].push_back(ladder::train_step(*sync, opt, mine, group.get()));
        }
        out.params[rank] = dt::snapshot_params(*model);
      },
      options, run.backend);
  return out;
}

std::vector<std::vector<double>> reference(const LadderRun& run) {
  dt::RunConfig config;
  config.world = run.world;
  config.per_rank = run.per_rank;
  config.steps = run.steps;
  return dt::train_reference(mlp_factory(), mlp_data(), config, /*per_slice=*/false);
}

void expect_equivalent(const LadderRun& run) {
  const Outcome got = train_rung(run);
  const auto want = reference(run);
  for (int r = 0; r < run.world; ++r) {
    EXPECT_EQ(got.params[r], got.params[0])
        << "rung " << run.rung << ": rank " << r << " differs from rank 0";
    EXPECT_LT(dt::max_relative_difference(got.params[r], want), 1e-10)
        << "rung " << run.rung << " " << run.backend << " world " << run.world << " rows/rank "
        << run.per_rank << " cap " << run.bucket_mb * kMiB << " B, rank " << r;
  }
}

}  // namespace

class LadderEquivalence : public ::testing::TestWithParam<std::tuple<int, std::string, int>> {};

TEST_P(LadderEquivalence, EqualsOneProcessOnTheWholeBatch) {
  auto [rung_number, backend, world] = GetParam();
  expect_equivalent({.rung = rung_number, .world = world, .backend = backend});
}

INSTANTIATE_TEST_SUITE_P(RungBackendWorld, LadderEquivalence,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                                            ::testing::Values(std::string("gloo"), std::string("shm")),
                                            ::testing::Values(1, 2, 3)));

TEST(LadderEquivalence, OneAndThreeRowsPerRank) {
  for (int r = 1; r <= 5; ++r)
    for (int64_t rows : {1, 3}) expect_equivalent({.rung = r, .world = 3, .per_rank = rows});
}

// Caps in bytes around the parameter sizes: each gradient its own bucket (1), at the last bias (40) +-1, just
// under / at / over the whole model (4520), and one bucket for all.
TEST(LadderEquivalence, BucketRungsAtEveryCapBoundary) {
  for (double cap : {1.0, 39.0, 40.0, 41.0, 4519.0, 4520.0, 4521.0, 1e9})
    for (int r : {4, 5})
      for (int world : {2, 3})
        expect_equivalent({.rung = r, .world = world, .bucket_mb = cap / kMiB, .backend = "shm"});
}

TEST(LadderRungs, EqualEachOther) {
  for (const std::string backend : {"gloo", "shm"}) {
    const Outcome first = train_rung({.rung = 1, .world = 3, .backend = backend});
    for (int r = 2; r <= 5; ++r) {
      const Outcome other = train_rung({.rung = r, .world = 3, .backend = backend});
      EXPECT_LT(dt::max_relative_difference(other.params[0], first.params[0]), 1e-12)
          << "rung " << r << " vs rung 1 over " << backend;
    }
  }
}

// What each idea sends per step: the whole model's gradient bytes every time; all-reduces: one per parameter
// (rungs 1 and 3), one (rung 2), one per bucket (rungs 4 and 5; DDP's first step adds the ranks' 4-byte
// agreement before its one-time bucket rebuild).
TEST(LadderRungs, AllReducesAndBytesPerStep) {
  size_t model_bytes = 0;
  for (size_t b : kParamBytes) model_bytes += b;
  for (double cap : {1.0, 40.0, 1000.0, 4520.0, 1e9}) {
    const int64_t buckets = static_cast<int64_t>(ladder::reverse_order_buckets(kParamBytes, cap).size());
    const int64_t want[] = {6, 1, 6, buckets, buckets};
    for (int r = 1; r <= 5; ++r) {
      const Outcome got =
          train_rung({.rung = r, .world = 2, .steps = 4, .bucket_mb = cap / kMiB, .backend = "shm"});
      for (int rank = 0; rank < 2; ++rank)
        for (size_t s = 0; s < got.steps[rank].size(); ++s) {
          const bool agreement = r == 5 && s == 0;  // DDP's one small all-reduce before its bucket rebuild
          EXPECT_EQ(got.steps[rank][s].collectives, want[r - 1] + (agreement ? 1 : 0))
              << "rung " << r << " cap " << cap << " rank " << rank << " step " << s;
          EXPECT_EQ(got.steps[rank][s].bytes, static_cast<int64_t>(model_bytes) + (agreement ? 4 : 0))
              << "rung " << r << " cap " << cap << " rank " << rank << " step " << s;
        }
    }
  }
}

// Rung 4's dozen-line bucketing is the reducer's (assign_buckets with both caps equal), over seeded random
// parameter sizes (0 bytes included) and caps at each prefix sum +-1.
TEST(LadderBuckets, SameAsTheReducersAssignment) {
  std::mt19937 gen(26);
  const size_t sizes[] = {0, 1, 4, 8, 40, 1000, 4096};
  for (size_t n : {1, 2, 3, 5, 7, 13}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<size_t> bytes(n);
      for (auto& b : bytes) b = sizes[gen() % std::size(sizes)];
      std::vector<BucketParamInfo> infos;
      std::vector<size_t> order;
      for (size_t i = 0; i < n; ++i) {
        infos.push_back({bytes[i], DType::F32, Device::cpu()});
        order.push_back(n - 1 - i);
      }
      std::vector<size_t> caps = {1};
      size_t prefix = 0;
      for (size_t k : order) {
        prefix += bytes[k];
        for (size_t c : {prefix - 1, prefix, prefix + 1})
          if (c > 0) caps.push_back(c);
      }
      for (size_t cap : caps)
        EXPECT_EQ(ladder::reverse_order_buckets(bytes, cap), assign_buckets(infos, order, cap, cap))
            << n << " parameters, cap " << cap << ", trial " << trial;
    }
  }
  EXPECT_TRUE(ladder::reverse_order_buckets({}, 100).empty());
}

TEST(LadderBuckets, SameAsDDPsFirstLayoutOfTheMLP) {
  for (double cap : {1.0, 40.0, 1000.0, 4520.0, 1e9}) {
    dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
      DDPOptions o;
      o.bucket_cap_mb = o.first_bucket_mb = cap / kMiB;
      DistributedDataParallel ddp(
          mlp_factory()(), std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg),
          o);
      EXPECT_EQ(ddp.reducer().bucket_layout(), ladder::reverse_order_buckets(kParamBytes, cap))
          << "cap " << cap;
    });
  }
}

namespace {
// A linear layer and a bias `spare` that forward adds only when use_spare.
class WithSpareParameter : public nn::Module {
 public:
  explicit WithSpareParameter(bool use_spare) : use_spare_(use_spare) {
    fc_ = register_module("fc", std::make_shared<nn::Linear>(12, 5, true, DType::F64));
    spare_ = register_parameter("spare", Tensor::zeros({5}, DType::F64));
  }
  Tensor forward(const Tensor& x) override {
    return use_spare_ ? ops::add(fc_->forward(x), spare_) : fc_->forward(x);
  }

 private:
  bool use_spare_;
  std::shared_ptr<nn::Linear> fc_;
  Tensor spare_;
};
}  // namespace

// Rungs 1-4 need every gradient; without one, every rank raises the same clear error (no rank waits for a
// collective the others never issue).
TEST(LadderRungs, ParameterWithoutGradientIsAClearErrorOnEveryRank) {
  for (int r = 1; r <= 4; ++r)
    for (int world : {1, 2}) {
      std::string message;
      try {
        train_rung({.rung = r, .world = world, .steps = 1},
                   [] { return std::make_shared<WithSpareParameter>(/*use_spare=*/false); });
      } catch (const std::exception& e) {
        message = e.what();
      }
      EXPECT_NE(message.find("rungs 1-4 expect every parameter to be used"), std::string::npos)
          << "rung " << r << " world " << world << ": " << message;
      EXPECT_NE(message.find("find_unused_parameters"), std::string::npos) << message;
    }
}

// Ranks that disagree: rank 0 uses `spare`, rank 1 does not. Rungs 1-4 do nothing to keep such ranks in step
// (rung 5 does: docs/ddp-step.md "When ranks disagree"), so rank 1 raises its clear error and rank 0 is left
// waiting for a collective rank 1 never issues - until the collective timeout, which then fails it. Neither
// rank may hang past that or abort the process (a destructor waiting on the orphaned collective must not
// throw).
TEST(LadderRungs, RanksThatDisagreeOnAParameterFailBothWithinTheTimeoutNoAbort) {
  for (const std::string backend : {"gloo", "shm"})
    for (int r = 1; r <= 4; ++r) {
      std::vector<std::string> errors(2);
      dist::ProcessGroupOptions options;
      options.timeout = std::chrono::seconds(2);
      const dt::BatchFn data = mlp_data();
      dist::run_threads(
          2,
          [&](int rank, dist::ProcessGroup& pg) {
            try {
              auto model = std::make_shared<WithSpareParameter>(/*use_spare=*/rank == 0);
              auto group = std::make_shared<ladder::CountingGroup>(
                  std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg));
              auto sync = rung(r)({model, group, 1000 / kMiB});
              optim::SGD opt(model->named_parameters(), {.lr = 0.1});
              dt::Batch full = data(0, 4);
              ladder::train_step(*sync, opt, ladder::Batch{full.x, full.y}.rows(rank * 2, rank * 2 + 2),
                                 group.get());
            } catch (const std::exception& e) {
              errors[rank] = e.what();
            }
          },
          options, backend);
      EXPECT_NE(errors[1].find("parameter 'spare'"), std::string::npos)
          << "rung " << r << " " << backend << " rank 1: " << errors[1];
      EXPECT_FALSE(errors[0].empty())
          << "rung " << r << " " << backend << ": rank 0 finished a step rank 1 failed";
    }
}
