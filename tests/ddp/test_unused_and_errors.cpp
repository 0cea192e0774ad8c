// test_unused_and_errors.cpp - parameters that receive no gradient (with and without
// find_unused_parameters), the ready-twice error, the model-mismatch error, buffer broadcast, overlap,
// bucket layout and the rebuild.
#include <gtest/gtest.h>

#include <mutex>

#include "models/branchy.h"
#include "models/cnn.h"
#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/reduce.h"
#include "runtime/optim/optimizer.h"
#include "runtime/sim/bucket_assignment.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

ModelFactory branchy_factory() {
  return [] { return std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64}); };
}
// Rows whose first feature's sign differs per rank-sized slice of 2 rows, changing with the step, so experts
// are used on some ranks only on some steps.
BatchFn branchy_data() {
  return [](int step, int64_t rows) {
    Tensor x = Tensor::randn({rows, 6}, 300 + step, DType::F64);
    double* p = x.data<double>();
    for (int64_t i = 0; i < rows; ++i) p[i * 6] = (((i / 2) + step) % 3 == 0 ? 1.0 : -1.0) * (1 + 0.1 * i);
    std::vector<int64_t> y(rows);
    for (int64_t i = 0; i < rows; ++i) y[i] = (i + step) % 3;
    return Batch{x, Tensor::from_data(y, {rows})};
  };
}
}  // namespace

TEST(Unused, FindUnusedParametersMatchesReferenceAndKeepsNeverUsedGradNone) {
  for (int world : {1, 2, 3, 4}) {
    for (double cap : {1e-9, 25.0}) {
      RunConfig run;
      run.world = world;
      run.per_rank = 2;
      run.ddp.find_unused_parameters = true;
      run.ddp.bucket_cap_mb = run.ddp.first_bucket_mb = cap;
      auto ranks = train_ddp(branchy_factory(), branchy_data(), run);
      auto ref = train_reference(branchy_factory(), branchy_data(), run, true);
      for (int r = 0; r < world; ++r)
        EXPECT_LT(max_relative_difference(ranks[r], ref), 1e-10) << "world " << world << " rank " << r;
    }
  }
  // never_used keeps grad none on every rank; experts used on one rank only get the average with zeros.
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(7);
    auto model = std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64});
    DDPOptions o;
    o.find_unused_parameters = true;
    DistributedDataParallel ddp(model, borrow(pg), o);
    Tensor x = Tensor::randn({2, 6}, 5, DType::F64);
    x.data<double>()[0] = x.data<double>()[6] =
        rank == 0 ? 1.0 : -1.0;  // rank 0 -> expert0, rank 1 -> expert1
    Tensor loss = ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1}, {2}));
    autograd::backward(loss);
    EXPECT_FALSE(model->never_used->weight.grad().defined());
    EXPECT_FALSE(model->never_used->bias.grad().defined());
    EXPECT_TRUE(model->expert0->weight.grad().defined());
    EXPECT_TRUE(model->expert1->weight.grad().defined());
    EXPECT_EQ(ddp.reducer().last_stats().num_unused_marked, 4u);  // the other expert's 2 + never_used's 2
  });
}

TEST(Unused, WithoutFlagTheErrorComesInThatBackwardWithNames) {
  std::vector<std::string> messages(2);
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(7);
    auto model = std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64});
    DistributedDataParallel ddp(model, borrow(pg), {});
    Tensor x = Tensor::randn({2, 6}, 5, DType::F64);
    x.data<double>()[0] = x.data<double>()[6] = 1.0;  // both ranks use expert0
    Tensor loss = ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1}, {2}));
    try {
      autograd::backward(loss);
    } catch (const Error& e) {
      messages[rank] = e.what();
    }
    // The group is still usable: the next collective matches on both ranks.
    Tensor t = Tensor::ones({3}, DType::F64);
    pg.allreduce(dist::CommBuffer{t.raw_data(), 3, DType::F64, Device::cpu(), t.storage()})->wait();
    EXPECT_EQ(t.to_double_vector()[0], 2.0);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& m = messages[r];
    ASSERT_FALSE(m.empty()) << "rank " << r << " raised no error";
    EXPECT_NE(m.find("rank " + std::to_string(r)), std::string::npos) << m;
    EXPECT_NE(m.find("never_used.weight  shape (8, 8)"), std::string::npos) << m;
    EXPECT_NE(m.find("never_used.bias"), std::string::npos) << m;
    EXPECT_NE(m.find("expert1.weight"), std::string::npos) << m;
    EXPECT_EQ(m.find("expert0.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("find_unused_parameters = true"), std::string::npos) << m;
    EXPECT_NE(m.find("take part in the loss"), std::string::npos) << m;
    EXPECT_NE(m.find("[6]"), std::string::npos) << "the index of never_used.weight: " << m;
  }
}

TEST(Errors, MarkedReadyTwiceNamesTheParameter) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    auto model = std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64});
    DDPOptions o;
    o.find_unused_parameters = true;
    DistributedDataParallel ddp(model, borrow(pg), o);
    Tensor x = Tensor::randn({2, 6}, 5, DType::F64);
    Tensor out = ddp.forward(x);
    // The loss uses never_used outside the outputs DDP saw: it was marked unused, then its hook fires.
    Tensor loss = ops::sum(out) + ops::sum(model->never_used->weight) * 0.0;
    try {
      autograd::backward(loss);
      FAIL() << "expected the ready-twice error";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("never_used.weight"), std::string::npos) << m;
      EXPECT_NE(m.find("marked ready twice"), std::string::npos) << m;
    }
  });
}

TEST(Errors, ModelMismatchNamesFirstDifferingParameterOnEveryRank) {
  std::vector<std::string> messages(3);
  dist::run_threads(3, [&](int rank, dist::ProcessGroup& pg) {
    models::MLPConfig c{12, {16, 16}, 5, DType::F64};
    if (rank == 2) c.hidden = {16, 17};
    auto model = std::make_shared<models::MLP>(c);
    try {
      DistributedDataParallel ddp(model, borrow(pg), {});
    } catch (const Error& e) {
      messages[rank] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    const std::string& m = messages[r];
    ASSERT_FALSE(m.empty()) << "rank " << r;
    EXPECT_NE(m.find("layers.2.weight (17, 16) float64"), std::string::npos) << m;
    EXPECT_NE(m.find("ranks that differ from rank 0: 2"), std::string::npos) << m;
  }
}

TEST(Buffers, BroadcastFromRankZeroAtConstructionAndBeforeForward) {
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(rank);
    auto model = std::make_shared<models::CNN>(models::CNNConfig{1, 3, 4, 8, 3, DType::F64});
    auto bn = model->named_buffers();
    bn[0].tensor.fill_(rank == 0 ? 0.5 : -3.0);
    DistributedDataParallel ddp(model, borrow(pg), {});
    EXPECT_DOUBLE_EQ(bn[0].tensor.to_double_vector()[0], 0.5);
    bn[0].tensor.fill_(rank == 0 ? 0.25 : 9.0);  // diverge again; the next forward re-broadcasts
    ddp.forward(Tensor::randn({2, 1, 8, 8}, 3 + rank, DType::F64));
    // after the forward, rank 0's 0.25 was the starting point of both ranks' running-mean update
    std::vector<double> mine = bn[0].tensor.to_double_vector();
    EXPECT_LT(std::abs(mine[0]), 1.0) << "rank " << rank << " kept its own buffer";
  });
}

TEST(Overlap, FirstBucketLaunchesBeforeBackwardEnds) {
  dist::run_threads(2, [&](int, dist::ProcessGroup& pg) {
    nn::manual_seed(1);
    auto model = std::make_shared<models::MLP>(models::MLPConfig{64, {256, 256}, 10, DType::F32});
    DDPOptions o;
    o.first_bucket_mb = o.bucket_cap_mb = 0.05;  // several buckets
    DistributedDataParallel ddp(model, borrow(pg), o);
    for (int it = 0; it < 2; ++it) {
      Tensor x = Tensor::randn({8, 64}, it);
      autograd::backward(
          ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8})));
      const auto& s = ddp.reducer().last_stats();
      ASSERT_GE(s.buckets.size(), 2u);
      EXPECT_LT(s.buckets[0].launched_s, s.backward_compute_s)
          << "bucket 0 must be launched while backward still runs: " << s.summary();
      for (size_t b = 1; b < s.buckets.size(); ++b)
        EXPECT_LE(s.buckets[b - 1].launched_s, s.buckets[b].launched_s) << "launch order";
    }
    EXPECT_TRUE(ddp.reducer().buckets_rebuilt());
  });
}

TEST(Overlap, DisabledLaunchesNothingBeforeBackwardEnds) {
  dist::run_threads(2, [&](int, dist::ProcessGroup& pg) {
    auto model = std::make_shared<models::MLP>(models::MLPConfig{64, {256, 256}, 10, DType::F32});
    DDPOptions o;
    o.first_bucket_mb = o.bucket_cap_mb = 0.05;
    o.overlap = false;
    DistributedDataParallel ddp(model, borrow(pg), o);
    Tensor x = Tensor::randn({8, 64}, 1);
    autograd::backward(
        ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8})));
    const auto& s = ddp.reducer().last_stats();
    for (auto& b : s.buckets) EXPECT_GE(b.launched_s, s.backward_compute_s);
  });
}

TEST(Buckets, ReverseOrderFirstBucketCappedPerDtype) {
  std::vector<BucketParamInfo> p = {{400, DType::F32, Device::cpu()},
                                    {400, DType::F32, Device::cpu()},
                                    {800, DType::F64, Device::cpu()},
                                    {400, DType::F32, Device::cpu()},
                                    {400, DType::F32, Device::cpu()}};
  auto b = assign_buckets(p, {4, 3, 2, 1, 0}, 400, 800);
  // f32: 4 closes the first bucket (cap 400); 3+1 reach 800; 0 left over. f64: 2 closes at 400.
  std::vector<std::vector<size_t>> expect = {{4}, {2}, {3, 1}, {0}};
  EXPECT_EQ(b, expect);
}

TEST(Buckets, RebuiltLayoutIsIdenticalOnAllRanks) {
  std::vector<std::vector<std::vector<size_t>>> layouts(3);
  dist::run_threads(3, [&](int rank, dist::ProcessGroup& pg) {
    auto model = std::make_shared<models::MLP>(models::MLPConfig{12, {16, 16}, 5, DType::F64});
    DDPOptions o;
    o.bucket_cap_mb = o.first_bucket_mb = 0.001;
    DistributedDataParallel ddp(model, borrow(pg), o);
    Tensor x = Tensor::randn({2, 12}, rank, DType::F64);
    autograd::backward(ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1}, {2})));
    EXPECT_TRUE(ddp.reducer().buckets_rebuilt());
    layouts[rank] = ddp.reducer().bucket_layout();
  });
  EXPECT_EQ(layouts[0], layouts[1]);
  EXPECT_EQ(layouts[0], layouts[2]);
}
