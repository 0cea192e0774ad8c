// test_disagreement.cpp - ranks that do DIFFERENT things (issue 10): a parameter unused on one rank only
// (that rank raises, catches and keeps training with the others), an error in the first iteration (no stale
// ready order), a backward that dies midway (its in-flight buckets are waited for), the bucket rebuild with
// find_unused_parameters (unused parameters keep their default place) and ranks with different bucket caps
// (rank 0's layout is adopted), and gradient_as_bucket_view with in-place zero_grad (grads ARE bucket views).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "models/branchy.h"
#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/node.h"
#include "runtime/distributed/local_world.h"
#include "runtime/nn/layers.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/reduce.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace ddp::testing;
using namespace std::chrono_literals;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
// Short enough that a rank left waiting fails the test in seconds instead of a minute.
dist::ProcessGroupOptions short_timeout() {
  dist::ProcessGroupOptions o;
  o.timeout = 5s;
  o.debug_collectives = false;
  return o;
}

// An identity whose backward throws: a backward that dies midway.
struct ThrowingIdentity : autograd::Node {
  std::vector<Tensor> apply(std::vector<Tensor>&) override { throw Error("backward died midway (test)"); }
  const char* name() const override { return "ThrowingIdentity"; }
};
Tensor throwing_identity(const Tensor& x) {
  Tensor y = x.detach();
  autograd::record(std::make_shared<ThrowingIdentity>(), {&x}, {&y});
  return y;
}

// a -> (b, when use_b) -> c. `die` puts a ThrowingIdentity between a and the rest: backward reaches c's and
// b's hooks (bucket 0 launches), then dies before a's.
struct Skippable : nn::Module {
  std::shared_ptr<nn::Linear> a, b, c;
  bool use_b = true, die = false;
  Skippable() {
    a = register_module("a", std::make_shared<nn::Linear>(4, 6, true, DType::F64));
    b = register_module("b", std::make_shared<nn::Linear>(6, 6, true, DType::F64));
    c = register_module("c", std::make_shared<nn::Linear>(6, 3, true, DType::F64));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::relu(a->forward(x));
    if (die) h = throwing_identity(h);
    if (use_b) h = ops::relu(b->forward(h));
    return c->forward(h);
  }
};
Batch skippable_batch(int step, int rank) {
  Tensor x = Tensor::randn({3, 4}, 100 * step + rank, DType::F64);
  return Batch{x, Tensor::from_data<int64_t>({step % 3, (step + rank) % 3, 1}, {3})};
}
}  // namespace

// Defect 2 (and 3): rank 0 does not use b in iteration 0, rank 1 does. Rank 0 raises the unused-parameter
// error, catches it and steps like the others; no rank may sit in the rebuild broadcast while the other
// all-reduces. Every step the replicas stay bitwise identical and equal to one process applying the averaged
// gradients (float64).
TEST(Disagreement, ParameterUnusedOnOneRankOnlyRaisesThereAndTrainingContinuesTogether) {
  const int steps = 4;
  std::vector<std::vector<std::vector<double>>> finals(2);
  std::vector<std::string> errors(2);
  std::vector<int> rebuilt(2, 0);
  dist::run_threads(
      2,
      [&](int rank, dist::ProcessGroup& pg) {
        nn::manual_seed(1000 + rank);
        auto model = std::make_shared<Skippable>();
        DDPOptions o;
        o.bucket_cap_mb = o.first_bucket_mb = 1e-9;  // one bucket per parameter
        DistributedDataParallel ddp(model, borrow(pg), o);
        optim::SGD opt(model->named_parameters(), {.lr = 0.1});
        for (int step = 0; step < steps; ++step) {
          model->use_b = !(rank == 0 && step == 0);
          Batch bt = skippable_batch(step, rank);
          opt.zero_grad();
          try {
            autograd::backward(ops::cross_entropy(ddp.forward(bt.x), bt.y));
          } catch (const Error& e) {
            errors[rank] += e.what();
          }
          opt.step();
        }
        rebuilt[rank] = ddp.reducer().buckets_rebuilt();
        finals[rank] = snapshot_params(*model);
      },
      short_timeout());
  EXPECT_NE(errors[0].find("b.weight"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("same averaged gradients"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1], "");
  EXPECT_TRUE(rebuilt[0] && rebuilt[1]) << "the rebuild should follow the first iteration that succeeded";
  EXPECT_TRUE(finals[0] == finals[1]) << "replicas diverged";

  nn::manual_seed(1000);
  auto ref = std::make_shared<Skippable>();
  optim::SGD opt(ref->named_parameters(), {.lr = 0.1});
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    for (int rank = 0; rank < 2; ++rank) {
      ref->use_b = !(rank == 0 && step == 0);
      Batch bt = skippable_batch(step, rank);
      autograd::backward(ops::cross_entropy(ref->forward(bt.x), bt.y) * 0.5);
    }
    opt.step();
  }
  EXPECT_LT(max_relative_difference(finals[0], snapshot_params(*ref)), 1e-12);
}

// Defect 3: the ready order of a failed first iteration must not leak into the next one.
TEST(Disagreement, ErrorInFirstIterationLeavesNoStaleReadyOrder) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    auto model = std::make_shared<Skippable>();
    DDPOptions o;
    o.bucket_cap_mb = o.first_bucket_mb = 1e-9;
    DistributedDataParallel ddp(model, borrow(pg), o);
    for (int step = 0; step < 3; ++step) {
      model->use_b = step != 0;
      Batch bt = skippable_batch(step, 0);
      model->zero_grad();
      if (step == 0) {
        EXPECT_THROW(autograd::backward(ops::cross_entropy(ddp.forward(bt.x), bt.y)), Error);
        EXPECT_FALSE(ddp.reducer().buckets_rebuilt());
      } else {
        autograd::backward(ops::cross_entropy(ddp.forward(bt.x), bt.y));  // must not throw
        EXPECT_TRUE(ddp.reducer().buckets_rebuilt());
        EXPECT_TRUE(model->b->weight.grad().defined());
      }
    }
  });
}

namespace {
// A process group whose all-reduces complete 300 ms after the real one: "still in flight" for a while.
class DelayingGroup : public dist::ProcessGroup {
 public:
  explicit DelayingGroup(dist::ProcessGroup& inner)
      : ProcessGroup(inner.rank(), inner.size()), inner_(inner) {}
  ~DelayingGroup() override {
    for (auto& t : threads_) t.join();
  }
  std::shared_ptr<dist::Work> allreduce(dist::CommBuffer buf, dist::ReduceOp op) override {
    auto real = inner_.allreduce(std::move(buf), op);
    auto w = std::make_shared<dist::Work>("delayed " + real->description());
    issued_.push_back(w);
    threads_.emplace_back([real, w] {
      std::exception_ptr err;
      try {
        real->wait();
      } catch (...) {
        err = std::current_exception();
      }
      std::this_thread::sleep_for(300ms);
      w->finish(err);
    });
    return w;
  }
  std::shared_ptr<dist::Work> broadcast(dist::CommBuffer b, int root) override {
    return inner_.broadcast(b, root);
  }
  std::shared_ptr<dist::Work> allgather(dist::CommBuffer i, dist::CommBuffer o) override {
    return inner_.allgather(i, o);
  }
  std::shared_ptr<dist::Work> reduce_scatter(dist::CommBuffer i, dist::CommBuffer o,
                                             dist::ReduceOp op) override {
    return inner_.reduce_scatter(i, o, op);
  }
  std::shared_ptr<dist::Work> barrier() override { return inner_.barrier(); }
  uint64_t next_sequence_number() const override { return inner_.next_sequence_number(); }
  std::string backend_name() const override { return inner_.backend_name(); }
  void abort(const std::string& why) override { inner_.abort(why); }
  bool aborted() const override { return inner_.aborted(); }
  bool device_memory_only() const override { return inner_.device_memory_only(); }
  bool records_device_events() const override { return inner_.records_device_events(); }
  bool all_issued_completed() {
    for (auto& w : issued_)
      if (!w->is_completed()) return false;
    return true;
  }

 private:
  dist::ProcessGroup& inner_;
  std::vector<std::shared_ptr<dist::Work>> issued_;
  std::vector<std::thread> threads_;
};
}  // namespace

// Defect 4: both ranks' backward dies after bucket 0 was launched. The next forward must wait for that
// all-reduce before the next backward writes into its buffer; the next iteration is then exact.
TEST(Disagreement, BackwardThatDiedMidwayIsWaitedForBeforeBuffersAreReused) {
  std::vector<std::vector<std::vector<double>>> grads(2);
  std::vector<int> settled(2, 0);
  dist::run_threads(
      2,
      [&](int rank, dist::ProcessGroup& pg) {
        auto slow = std::make_shared<DelayingGroup>(pg);
        nn::manual_seed(1000 + rank);
        auto model = std::make_shared<Skippable>();
        DDPOptions o;
        o.bucket_cap_mb = o.first_bucket_mb = 1e-9;
        o.rebuild_buckets = false;
        DistributedDataParallel ddp(model, slow, o);
        model->die = true;
        Batch bt = skippable_batch(0, rank);
        EXPECT_THROW(autograd::backward(ops::cross_entropy(ddp.forward(bt.x), bt.y)), Error);
        model->die = false;
        model->zero_grad();
        Batch next = skippable_batch(1, rank);
        Tensor out = ddp.forward(next.x);  // prepare_for_backward settles the dead iteration
        settled[rank] = slow->all_issued_completed();
        autograd::backward(ops::cross_entropy(out, next.y));
        grads[rank].clear();
        for (auto& p : model->parameters()) grads[rank].push_back(p.grad().to_double_vector());
      },
      short_timeout());
  EXPECT_TRUE(settled[0] && settled[1]) << "an all-reduce of the dead backward was still in flight";
  EXPECT_TRUE(grads[0] == grads[1]);
  nn::manual_seed(1000);
  auto ref = std::make_shared<Skippable>();
  for (int rank = 0; rank < 2; ++rank) {
    Batch next = skippable_batch(1, rank);
    autograd::backward(ops::cross_entropy(ref->forward(next.x), next.y) * 0.5);
  }
  std::vector<std::vector<double>> expect;
  for (auto& p : ref->parameters()) expect.push_back(p.grad().to_double_vector());
  EXPECT_LT(max_relative_difference(grads[0], expect), 1e-12);
}

// Defect 6: parameters unused in the first iteration keep their default place in the rebuilt buckets (they
// used to land in bucket 0, which then waited for them whenever they were used); and ranks with different
// bucket caps end up with rank 0's layout, before and after the rebuild.
TEST(Disagreement, RebuildKeepsUnusedParametersInPlaceAndRankZerosLayoutWins) {
  std::vector<std::vector<std::vector<size_t>>> before(2), after(2);
  std::vector<std::vector<std::vector<double>>> finals(2);
  dist::run_threads(
      2,
      [&](int rank, dist::ProcessGroup& pg) {
        nn::manual_seed(7);
        auto model = std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64});
        DDPOptions o;
        o.find_unused_parameters = true;
        o.bucket_cap_mb = o.first_bucket_mb = rank == 0 ? 1e-9 : 25.0;  // rank 1 asks for one bucket
        DistributedDataParallel ddp(model, borrow(pg), o);
        before[rank] = ddp.reducer().bucket_layout();
        optim::SGD opt(model->named_parameters(), {.lr = 0.1});
        for (int step = 0; step < 3; ++step) {
          Tensor x = Tensor::randn({2, 6}, 5 + step, DType::F64);
          const double sign = step == 0 ? 1.0 : (rank == 0 ? 1.0 : -1.0);  // step 0: expert0 only
          x.data<double>()[0] = x.data<double>()[6] = sign;
          opt.zero_grad();
          autograd::backward(ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1}, {2})));
          opt.step();
          if (step == 0) after[rank] = ddp.reducer().bucket_layout();
        }
        finals[rank] = snapshot_params(*model);
      },
      short_timeout());
  EXPECT_EQ(before[0], before[1]);
  EXPECT_EQ(before[0].size(), 10u) << "rank 0's caps: one parameter per bucket";
  EXPECT_EQ(after[0], after[1]);
  ASSERT_EQ(after[0].size(), 10u);
  // Registration order: trunk.w 0, trunk.b 1, expert0 2-3, expert1 4-5, never_used 6-7, head 8-9.
  // expert1 and never_used were unused in iteration 0: they follow head, as in the default order.
  std::vector<size_t> flat;
  for (auto& b : after[0]) flat.insert(flat.end(), b.begin(), b.end());
  auto pos = [&](size_t i) { return std::find(flat.begin(), flat.end(), i) - flat.begin(); };
  for (size_t unused : {4, 5, 6, 7}) {
    EXPECT_GT(pos(unused), pos(8)) << "parameter " << unused << " placed before head";
    EXPECT_GT(pos(unused), pos(9)) << "parameter " << unused << " placed before head";
    EXPECT_LT(pos(unused), pos(2)) << "parameter " << unused << " placed after expert0 (default order)";
  }
  EXPECT_TRUE(finals[0] == finals[1]);
}

// Defect 7: with gradient_as_bucket_view and zero_grad(set_to_none = false), every gradient IS a view of its
// bucket (params of one bucket share one storage), the same memory every step, and training is exact.
TEST(Disagreement, GradientAsBucketViewWithInPlaceZeroGradKeepsGradsInTheBuckets) {
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(3);
    auto model = std::make_shared<models::MLP>(models::MLPConfig{12, {16, 16}, 5, DType::F64});
    DDPOptions o;
    o.gradient_as_bucket_view = true;
    DistributedDataParallel ddp(model, borrow(pg), o);  // 25 MB cap: one bucket
    optim::SGD opt(model->named_parameters(), {.lr = 0.1});
    std::vector<const TensorImpl*> first_grads;
    for (int step = 0; step < 4; ++step) {
      Tensor x = Tensor::randn({2, 12}, 10 * step + rank, DType::F64);
      opt.zero_grad(/*set_to_none=*/false);
      autograd::backward(ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 3}, {2})));
      auto params = model->parameters();
      for (auto& p : params) EXPECT_EQ(p.grad().storage(), params[0].grad().storage()) << "not one bucket";
      if (step == 1) {
        for (auto& p : params) first_grads.push_back(p.grad().impl());
      } else if (step > 1) {
        for (size_t i = 0; i < params.size(); ++i)
          EXPECT_EQ(params[i].grad().impl(), first_grads[i]) << "a new gradient tensor at step " << step;
      }
      opt.step();
    }
  });
  RunConfig run;
  run.ddp.gradient_as_bucket_view = true;
  run.set_to_none = false;
  auto make = [] { return std::make_shared<models::MLP>(models::MLPConfig{12, {16, 16}, 5, DType::F64}); };
  auto data = [](int step, int64_t rows) {
    std::vector<int64_t> y(rows);
    for (int64_t i = 0; i < rows; ++i) y[i] = (i + step) % 5;
    return Batch{Tensor::randn({rows, 12}, 50 + step, DType::F64), Tensor::from_data(y, {rows})};
  };
  auto ranks = train_ddp(make, data, run);
  EXPECT_LT(max_relative_difference(ranks[0], train_reference(make, data, run, true)), 1e-12);
}
