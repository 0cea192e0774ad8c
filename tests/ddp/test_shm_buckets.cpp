// test_shm_buckets.cpp - DDP over the shm group keeps its gradient buckets in the group's registered
// shared-memory buffers: every bucket's all-reduce takes the in-place path, and the averaged gradients are
// bitwise the mean of the ranks' local gradients (world 2), with and without gradient_as_bucket_view (then
// .grad IS the shared bucket: no copy-in, no write-back).
#include <gtest/gtest.h>

#include <mutex>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/shm/shm_group.h"
#include "runtime/ops/loss.h"

using namespace ddp;

namespace {
using Grads = std::vector<std::vector<double>>;

Grads grads_of(nn::Module& m) {
  Grads g;
  for (auto& p : m.named_parameters()) g.push_back(p.tensor.grad().to_double_vector());
  return g;
}
}  // namespace

TEST(ShmBuckets, EveryBucketIsAllReducedInPlaceAndGivesTheMeanOfTheRanks) {
  for (bool view : {false, true}) {
    SCOPED_TRACE(view ? "gradient_as_bucket_view" : "copy into buckets");
    std::vector<Grads> local(2), synced(2);
    std::mutex mu;
    dist::ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(60);
    dist::run_threads(
        2,
        [&](int rank, dist::ProcessGroup& pg) {
          auto& shm = dynamic_cast<dist::ShmProcessGroup&>(pg);
          nn::manual_seed(5 + rank);
          // float32 weights of 128 KiB each: every bucket is above the in-place threshold.
          auto model = std::make_shared<models::MLP>(models::MLPConfig{64, {512}, 64, DType::F32});
          DDPOptions opt;
          opt.gradient_as_bucket_view = view;
          opt.first_bucket_mb = opt.bucket_cap_mb = 0.1;  // two buckets
          DistributedDataParallel ddp(
              model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg), opt);
          const size_t buckets = ddp.reducer().bucket_layout().size();
          ASSERT_GE(buckets, 2u);
          Tensor x = Tensor::randn({8, 64}, 300 + rank);
          Tensor y = Tensor::from_data<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8});
          {
            auto guard = ddp.no_sync();  // this rank's own gradients
            autograd::backward(ops::cross_entropy(ddp.forward(x), y));
          }
          Grads mine = grads_of(*model);
          for (auto& p : model->named_parameters()) p.tensor.grad().zero_();
          const uint64_t before = shm.direct_allreduces();
          autograd::backward(ops::cross_entropy(ddp.forward(x), y));
          EXPECT_EQ(shm.direct_allreduces() - before, buckets) << "not every bucket went in place";
          std::lock_guard<std::mutex> g(mu);
          local[rank] = mine;
          synced[rank] = grads_of(*model);
        },
        o, "shm");
    ASSERT_EQ(synced[0], synced[1]) << "ranks differ";
    for (size_t p = 0; p < local[0].size(); ++p)
      for (size_t i = 0; i < local[0][p].size(); ++i) {
        // float32 arithmetic, as the all-reduce does it (the sum of two, halved, is exact in any order)
        const float want = (static_cast<float>(local[0][p][i]) + static_cast<float>(local[1][p][i])) / 2.0f;
        ASSERT_EQ(static_cast<float>(synced[0][p][i]), want) << "parameter " << p << " element " << i;
      }
  }
}

// With .grad set to none between steps (zero_grad's default), linear's backward computes every weight and
// bias gradient straight into its bucket slot: the reducer copies none into the buckets
// (IterationStats::num_gradients_copied), with gradient_as_bucket_view or without, and the gradients agree
// bitwise. Without it .grad ends the step as a tensor of its own: a step's gradients, held by the caller,
// are not changed by the next step's backward (with it they are the bucket, which the next step rewrites).
TEST(ShmBuckets, BackwardWritesTheGradientsIntoTheBucketsWithOrWithoutGradientAsBucketView) {
  std::vector<Grads> synced(2);
  std::vector<size_t> copied(2);
  size_t num_params = 0;
  std::mutex mu;
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);
  for (bool view : {false, true}) {
    SCOPED_TRACE(view ? "gradient_as_bucket_view" : "copy into buckets");
    dist::run_threads(
        2,
        [&](int rank, dist::ProcessGroup& pg) {
          nn::manual_seed(5);
          auto model = std::make_shared<models::MLP>(models::MLPConfig{64, {512}, 64, DType::F32});
          DDPOptions opt;
          opt.gradient_as_bucket_view = view;
          opt.first_bucket_mb = opt.bucket_cap_mb = 0.1;
          DistributedDataParallel ddp(
              model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg), opt);
          Tensor y = Tensor::from_data<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8});
          std::vector<Tensor> held;  // step 1's .grad tensors
          Grads held_values;
          for (int step = 0; step < 3; ++step) {  // the bucket rebuild happens after the first
            for (auto& p : model->named_parameters()) p.tensor.set_grad(Tensor());  // zero_grad(set_to_none)
            autograd::backward(
                ops::cross_entropy(ddp.forward(Tensor::randn({8, 64}, 300 + 10 * step + rank)), y));
            if (step == 1) {
              for (auto& p : model->named_parameters()) held.push_back(p.tensor.grad());
              held_values = grads_of(*model);
            }
          }
          Grads held_now;
          for (const Tensor& t : held) held_now.push_back(t.to_double_vector());
          std::lock_guard<std::mutex> g(mu);
          if (view)
            EXPECT_NE(held_now, held_values)
                << "rank " << rank << ": .grad is the bucket, rewritten by step 2";
          else
            EXPECT_EQ(held_now, held_values) << "rank " << rank << ": step 1's .grad changed by step 2";
          copied[rank] = ddp.reducer().last_stats().num_gradients_copied;
          num_params = model->named_parameters().size();
          if (view) {
            EXPECT_EQ(grads_of(*model), synced[rank])
                << "rank " << rank << ": gradients differ from plain buckets";
          } else {
            synced[rank] = grads_of(*model);
          }
        },
        o, "shm");
    for (int r = 0; r < 2; ++r) EXPECT_EQ(copied[r], 0u) << "rank " << r << " of " << num_params;
  }
}

// Without gradient_as_bucket_view a no_sync() backward gets no gradient destination (no write-back follows
// it): its .grad is a tensor of its own, so a caller holding it sees no change when the next backward (after
// zero_grad(set_to_none)) runs - with the bucket slot as destination the next backward would write into it.
// Then a synchronized step over the accumulated gradients gives the mean of the ranks' sums, as before.
TEST(ShmBuckets, NoSyncGradientsAreTensorsOfTheirOwnWithoutGradientAsBucketView) {
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);
  dist::run_threads(
      2,
      [&](int rank, dist::ProcessGroup& pg) {
        nn::manual_seed(5);
        auto model = std::make_shared<models::MLP>(models::MLPConfig{64, {512}, 64, DType::F32});
        DDPOptions opt;
        opt.first_bucket_mb = opt.bucket_cap_mb = 0.1;
        DistributedDataParallel ddp(
            model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg), opt);
        Tensor y = Tensor::from_data<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8});
        auto backward_on = [&](uint64_t seed) {
          autograd::backward(ops::cross_entropy(ddp.forward(Tensor::randn({8, 64}, seed)), y));
        };
        for (int step = 0; step < 2; ++step) {  // past the bucket rebuild
          for (auto& p : model->named_parameters()) p.tensor.set_grad(Tensor());
          backward_on(100 + 10 * step + rank);
        }
        std::vector<Tensor> held;
        Grads held_values;
        {
          auto guard = ddp.no_sync();
          for (auto& p : model->named_parameters()) p.tensor.set_grad(Tensor());
          backward_on(200 + rank);
          for (auto& p : model->named_parameters()) held.push_back(p.tensor.grad());
          held_values = grads_of(*model);
          for (auto& p : model->named_parameters()) p.tensor.set_grad(Tensor());
          backward_on(300 + rank);
        }
        Grads held_now;
        for (const Tensor& t : held) held_now.push_back(t.to_double_vector());
        EXPECT_EQ(held_now, held_values)
            << "rank " << rank << ": a no_sync .grad changed by the next backward";
      },
      o, "shm");
}
