// test_sync_batchnorm.cpp - SyncBatchNorm: the op over uneven (and empty) per-rank batches equals one
// batch_norm2d over the concatenation (outputs, input/weight/bias gradients, running stats); its gradient
// passes a float64 finite-difference check; convert_sync_batchnorm shares the layers' tensors; and the CNN
// trained with DDP + SyncBatchNorm on N ranks equals one process on the whole batch (float64, 1e-10), with
// equal and with different batch sizes per rank.
#include <gtest/gtest.h>

#include <mutex>
#include <numeric>

#include "models/cnn.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/nn/sync_batchnorm.h"
#include "runtime/ops/batchnorm.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/shape.h"
#include "runtime/ops/sync_batchnorm.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/ddp_test_util.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using namespace ddp::testing;

namespace {

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

// rows [begin, end) of every rank's share of a batch with the given per-rank sizes.
std::vector<int64_t> offsets_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> off(sizes.size() + 1, 0);
  for (size_t r = 0; r < sizes.size(); ++r) off[r + 1] = off[r] + sizes[r];
  return off;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << what << " [" << i << "]";
}

// One op call on uneven batches (an empty rank included) against batch_norm2d over the concatenation.
void check_op_against_single_batch(const std::vector<int64_t>& sizes) {
  const int world = static_cast<int>(sizes.size());
  const int64_t C = 3, H = 2, W = 3;
  const auto off = offsets_of(sizes);
  const int64_t total = off.back();
  Tensor x_all = Tensor::randn({total, C, H, W}, 7, DType::F64, 2.0);
  Tensor dy_all = Tensor::randn({total, C, H, W}, 8, DType::F64);
  Tensor w0 = Tensor::randn({C}, 9, DType::F64), b0 = Tensor::randn({C}, 10, DType::F64);

  // Reference: one process, the whole batch.
  Tensor xr = x_all.clone().set_requires_grad(true);
  Tensor wr = w0.clone().set_requires_grad(true), br = b0.clone().set_requires_grad(true);
  Tensor rm_ref = Tensor::zeros({C}, DType::F64), rv_ref = Tensor::ones({C}, DType::F64);
  Tensor yr = ops::batch_norm2d(xr, wr, br, rm_ref, rv_ref, true, 0.1, 1e-5);
  autograd::backward({yr}, {dy_all});

  std::mutex mu;
  std::vector<double> dweight_sum(C, 0.0), dbias_sum(C, 0.0);
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    Tensor x = x_all.slice0(off[rank], off[rank + 1]).clone().set_requires_grad(true);
    Tensor w = w0.clone().set_requires_grad(true), b = b0.clone().set_requires_grad(true);
    Tensor rm = Tensor::zeros({C}, DType::F64), rv = Tensor::ones({C}, DType::F64);
    Tensor y = ops::sync_batch_norm2d(x, w, b, rm, rv, pg, 0.1, 1e-5);
    autograd::backward({y}, {dy_all.slice0(off[rank], off[rank + 1]).clone()});
    std::lock_guard<std::mutex> g(mu);
    if (sizes[rank] > 0) {
      expect_close(y.to_double_vector(), yr.detach().slice0(off[rank], off[rank + 1]).to_double_vector(), 1e-12,
                   "output");
      expect_close(x.grad().to_double_vector(), xr.grad().slice0(off[rank], off[rank + 1]).to_double_vector(),
                   1e-12, "grad x");
    }
    expect_close(rm.to_double_vector(), rm_ref.to_double_vector(), 1e-12, "running_mean");
    expect_close(rv.to_double_vector(), rv_ref.to_double_vector(), 1e-12, "running_var (unbiased, global N)");
    auto dw = w.grad().to_double_vector(), db = b.grad().to_double_vector();
    for (int64_t c = 0; c < C; ++c) {
      dweight_sum[c] += dw[c];
      dbias_sum[c] += db[c];
    }
  });
  // Weight and bias gradients are local; their sum over ranks (what DDP all-reduces) is the reference.
  expect_close(dweight_sum, wr.grad().to_double_vector(), 1e-11, "sum of weight grads");
  expect_close(dbias_sum, br.grad().to_double_vector(), 1e-11, "sum of bias grads");
}

}  // namespace

TEST(SyncBatchNormOp, EqualBatchesMatchOneBatch) { check_op_against_single_batch({2, 2}); }
TEST(SyncBatchNormOp, UnevenBatchesMatchOneBatch) { check_op_against_single_batch({1, 4, 2}); }
TEST(SyncBatchNormOp, EmptyRankStillJoinsAndContributesNothing) { check_op_against_single_batch({3, 0, 2}); }

TEST(SyncBatchNormOp, GradcheckFloat64) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    Tensor x = random_f64({3, 2, 2, 2}, 1), w = random_f64({2}, 2), b = random_f64({2}, 3);
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) {
          return ops::sync_batch_norm2d(in[0], in[1], in[2], Tensor(), Tensor(), pg, 0.1, 1e-5);
        },
        {x, w, b}));
  });
}

TEST(SyncBatchNormOp, AllRanksEmptyIsAClearError) {
  dist::run_threads(2, [&](int, dist::ProcessGroup& pg) {
    Tensor x = Tensor::zeros({0, 2, 2, 2}, DType::F64);
    try {
      ops::sync_batch_norm2d(x, Tensor(), Tensor(), Tensor(), Tensor(), pg);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("more than one value per channel over all ranks"), std::string::npos)
          << e.what();
    }
  });
}

TEST(ConvertSyncBatchNorm, SharesTensorsAndKeepsNames) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    auto model = std::make_shared<models::CNN>(models::CNNConfig{1, 3, 4, 8, 3, DType::F64});
    auto before_p = model->named_parameters();
    auto before_b = model->named_buffers();
    auto converted = nn::convert_sync_batchnorm(model, borrow(pg));
    EXPECT_EQ(converted.get(), model.get());
    EXPECT_EQ(nn::count_sync_batchnorm(*converted), 2);
    auto after_p = converted->named_parameters();
    auto after_b = converted->named_buffers();
    ASSERT_EQ(after_p.size(), before_p.size());
    ASSERT_EQ(after_b.size(), before_b.size());
    for (size_t i = 0; i < after_p.size(); ++i) {
      EXPECT_EQ(after_p[i].name, before_p[i].name);
      EXPECT_EQ(after_p[i].tensor.impl(), before_p[i].tensor.impl()) << after_p[i].name << " was copied";
    }
    for (size_t i = 0; i < after_b.size(); ++i) EXPECT_EQ(after_b[i].tensor.impl(), before_b[i].tensor.impl());
    // A BatchNorm2d root becomes a SyncBatchNorm itself.
    auto bn = std::make_shared<nn::BatchNorm2d>(4);
    auto root = nn::convert_sync_batchnorm(bn, borrow(pg));
    EXPECT_NE(dynamic_cast<nn::SyncBatchNorm*>(root.get()), nullptr);
    EXPECT_EQ(root->named_parameters()[0].tensor.impl(), bn->weight.impl());
  });
}

namespace {
// A module that keeps a typed pointer to its BatchNorm2d besides the tree: conversion cannot reach it.
struct HoldsItsBatchNorm : nn::Module {
  HoldsItsBatchNorm() { bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(2)); }
  Tensor forward(const Tensor& x) override { return bn->forward(x); }
  std::shared_ptr<nn::BatchNorm2d> bn;
};
}  // namespace

TEST(ConvertSyncBatchNorm, ATypedMemberPointerIsAClearError) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    auto m = std::make_shared<HoldsItsBatchNorm>();
    try {
      nn::convert_sync_batchnorm(m, borrow(pg));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'bn' is also held outside the module tree"), std::string::npos)
          << e.what();
    }
  });
}

namespace {
// Trains the small float64 CNN for `steps` SGD-momentum steps. sizes empty: one process on the whole batch
// (plain BatchNorm2d). Otherwise DDP + SyncBatchNorm on sizes.size() ranks, rank r taking sizes[r] rows; each
// rank's loss is its share of the global mean (sum of its rows' losses * world / total), so DDP's average
// of the gradients is the gradient of the whole batch's mean loss. Returns rank 0's parameters and buffers.
std::vector<std::vector<double>> train_cnn(const std::vector<int64_t>& sizes, int64_t total, int steps) {
  auto make = [] { return std::make_shared<models::CNN>(models::CNNConfig{1, 3, 4, 8, 3, DType::F64}); };
  auto batch = [total](int step) {
    Batch b;
    b.x = Tensor::randn({total, 1, 8, 8}, 300 + step, DType::F64);
    std::vector<int64_t> y(total);
    for (int64_t i = 0; i < total; ++i) y[i] = (i * 5 + step) % 3;
    b.y = Tensor::from_data(y, {total});
    return b;
  };
  auto snapshot = [](const nn::Module& m) {
    auto out = snapshot_params(m);
    for (auto& b : snapshot_buffers(m)) out.push_back(b);
    return out;
  };
  const optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9};
  if (sizes.empty()) {
    nn::manual_seed(1000);
    auto model = make();
    optim::SGD opt(model->named_parameters(), sgd);
    for (int s = 0; s < steps; ++s) {
      Batch b = batch(s);
      opt.zero_grad();
      autograd::backward(ops::cross_entropy(model->forward(b.x), b.y));
      opt.step();
    }
    return snapshot(*model);
  }
  const int world = static_cast<int>(sizes.size());
  const auto off = offsets_of(sizes);
  EXPECT_EQ(off.back(), total);
  std::vector<std::vector<double>> rank0;
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(1000 + rank);  // DDP broadcasts rank 0's weights
    auto model = nn::convert_sync_batchnorm(make(), borrow(pg));
    DistributedDataParallel ddp(model, borrow(pg));
    optim::SGD opt(model->named_parameters(), sgd);
    for (int s = 0; s < steps; ++s) {
      Batch b = batch(s).rows(off[rank], off[rank + 1]);
      opt.zero_grad();
      Tensor loss = ops::cross_entropy(ddp.forward(b.x), b.y) *
                    (static_cast<double>(sizes[rank]) * world / static_cast<double>(total));
      autograd::backward(loss);
      opt.step();
    }
    if (rank == 0) rank0 = snapshot(*model);
  });
  return rank0;
}
}  // namespace

TEST(SyncBatchNormDDP, CNNOnNRanksEqualsOneProcessWithTheWholeBatch) {
  const int steps = 4;
  for (int world : {2, 3}) {
    auto ref = train_cnn({}, 2 * world, steps);
    auto got = train_cnn(std::vector<int64_t>(world, 2), 2 * world, steps);
    EXPECT_LT(max_relative_difference(got, ref), 1e-10) << "world " << world;
  }
}

TEST(SyncBatchNormDDP, CNNWithDifferentBatchSizesPerRankEqualsOneProcess) {
  const int steps = 4;
  auto ref = train_cnn({}, 7, steps);
  auto got = train_cnn({1, 4, 2}, 7, steps);
  EXPECT_LT(max_relative_difference(got, ref), 1e-10);
}
