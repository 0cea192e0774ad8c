// test_held_grads.cpp - the default mode's write-back without a clone (docs/ddp-step.md, "write-back"): after a
// synchronized step .grad views its bucket through a storage lent to the caller, and the next step uses the
// bucket's other buffer while anything lent from the first is alive. A caller that holds step k's .grad (or
// only a view of it) while step k+1 (and k+2) run sees step k's values; one that holds nothing gets no clone
// (IterationStats::num_gradients_cloned 0); one that holds every step's .grad gets the clone every step. In
// float64 all three give bitwise the same gradients and parameters as gradient_as_bucket_view, step by step,
// with SGD stepping on the views. With zero_grad(set_to_none=false) .grad stays the same tensors from step to
// step (filled in place, as in PyTorch), without a clone. Worlds 1 and 2, Gloo and shm.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"

using namespace ddp;

namespace {
constexpr int kSteps = 6;  // past the bucket rebuild after the first, and both buffers used twice
using Values = std::vector<std::vector<double>>;

// What the caller does with each step's .grad.
enum class Hold {
  Nothing,     // zero_grad(set_to_none) and nothing kept: .grad views the bucket, no clone
  OneStep,     // keeps step k's .grad while step k+1 runs, then drops it
  TwoSteps,    // keeps step k's .grad while steps k+1 and k+2 run
  AView,       // keeps only a slice of one parameter's .grad, for two steps
  Everything,  // keeps every step's .grad to the end: the clone every step (the old write-back)
  InPlace,     // zero_grad(set_to_none=false): .grad is the same tensor every step
  BucketView,  // gradient_as_bucket_view, the reference
};

const char* name_of(Hold h) {
  switch (h) {
    case Hold::Nothing: return "nothing held";
    case Hold::OneStep: return "step k held during step k+1";
    case Hold::TwoSteps: return "step k held during steps k+1 and k+2";
    case Hold::AView: return "a slice of one .grad held during two steps";
    case Hold::Everything: return "every step's .grad held";
    case Hold::InPlace: return "zero_grad(set_to_none=false)";
    case Hold::BucketView: return "gradient_as_bucket_view";
  }
  return "?";
}

Values values_of(const std::vector<Tensor>& ts) {
  Values v;
  for (const Tensor& t : ts) v.push_back(t.to_double_vector());
  return v;
}

struct Outcome {
  std::vector<Values> grads;  // per step: every parameter's .grad right after the step's backward
  Values params;              // after the last optimizer step
  std::vector<size_t> cloned;
  std::vector<Tensor> first_grads;  // InPlace: step 0's .grad tensors
};

// kSteps steps of SGD on rank-dependent data; checks on the way that nothing held changed.
Outcome run(int world, const std::string& backend, Hold hold, int rank, dist::ProcessGroup& pg) {
  const std::string where = std::string(name_of(hold)) + ", world " + std::to_string(world) + ", " + backend +
                            ", rank " + std::to_string(rank);
  nn::manual_seed(7);
  auto model = std::make_shared<models::MLP>(models::MLPConfig{12, {16, 8}, 5, DType::F64});
  DDPOptions o;
  o.first_bucket_mb = o.bucket_cap_mb = 0.0005;  // a few buckets
  o.gradient_as_bucket_view = hold == Hold::BucketView;
  DistributedDataParallel ddp(model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg),
                              o);
  optim::SGD sgd(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  auto params = model->named_parameters();
  struct Kept {
    std::vector<Tensor> tensors;
    Values values;
    int until = 0;  // checked after each step up to this one, then dropped
  };
  std::vector<Kept> kept;
  Outcome out;
  const Tensor y = Tensor::from_data<int64_t>({0, 1, 2, 3, 4, 0}, {6});
  for (int step = 0; step < kSteps; ++step) {
    sgd.zero_grad(/*set_to_none=*/hold != Hold::BucketView && hold != Hold::InPlace);
    autograd::backward(
        ops::cross_entropy(ddp.forward(Tensor::randn({6, 12}, 900 + 10 * step + rank, DType::F64)), y));
    std::vector<Tensor> grads;
    for (auto& p : params) grads.push_back(p.tensor.grad());
    if (hold == Hold::InPlace) {
      if (step == 0) out.first_grads = grads;
      for (size_t i = 0; i < grads.size(); ++i)
        EXPECT_EQ(grads[i].impl(), out.first_grads[i].impl())
            << where << ", step " << step << ", " << params[i].name << ": .grad is not step 0's tensor";
    }
    out.grads.push_back(values_of(grads));
    out.cloned.push_back(ddp.reducer().last_stats().num_gradients_cloned);
    // What was held through this step still has the values of its own step.
    for (const Kept& k : kept)
      EXPECT_EQ(values_of(k.tensors), k.values) << where << ": a .grad held since an earlier step changed in step "
                                                 << step;
    std::erase_if(kept, [&](const Kept& k) { return k.until <= step; });
    switch (hold) {
      case Hold::OneStep: kept.push_back({grads, values_of(grads), step + 1}); break;
      case Hold::TwoSteps: kept.push_back({grads, values_of(grads), step + 2}); break;
      case Hold::Everything: kept.push_back({grads, values_of(grads), kSteps}); break;
      case Hold::AView: {
        std::vector<Tensor> v{grads[2].view({-1}).slice0(3, 9)};
        kept.push_back({v, values_of(v), step + 2});
        break;
      }
      default: break;
    }
    grads.clear();
    sgd.step();
  }
  for (auto& p : params) out.params.push_back(p.tensor.to_double_vector());
  return out;
}
}  // namespace

TEST(HeldGrads, AStepsGradHeldWhileLaterStepsRunKeepsItsValueAndNothingHeldMeansNoClone) {
  for (int world : {1, 2})
    for (const char* backend : {"gloo", "shm"}) {
      std::vector<std::vector<Outcome>> outcomes(static_cast<size_t>(world));
      const std::vector<Hold> holds = {Hold::BucketView, Hold::Nothing, Hold::OneStep,
                                       Hold::TwoSteps,  Hold::AView,   Hold::Everything, Hold::InPlace};
      dist::ProcessGroupOptions pgo;
      pgo.timeout = std::chrono::seconds(30);
      dist::run_threads(
          world,
          [&](int rank, dist::ProcessGroup& pg) {
            for (Hold h : holds) outcomes[static_cast<size_t>(rank)].push_back(run(world, backend, h, rank, pg));
          },
          pgo, backend);
      if (HasFailure()) return;
      for (int rank = 0; rank < world; ++rank) {
        const auto& per = outcomes[static_cast<size_t>(rank)];
        const size_t n = per[0].params.size();
        for (size_t h = 1; h < holds.size(); ++h) {
          const std::string at = std::string(name_of(holds[h])) + ", world " + std::to_string(world) + ", " +
                                 backend + ", rank " + std::to_string(rank);
          // float64, the same order of additions: bitwise those of gradient_as_bucket_view.
          EXPECT_EQ(per[h].grads, per[0].grads) << at << ": gradients differ from gradient_as_bucket_view";
          EXPECT_EQ(per[h].params, per[0].params) << at << ": parameters differ from gradient_as_bucket_view";
          for (int step = 0; step < kSteps; ++step) {
            const size_t cloned = per[h].cloned[static_cast<size_t>(step)];
            switch (holds[h]) {
              case Hold::Nothing:
              case Hold::InPlace:
                EXPECT_EQ(cloned, 0u) << at << ", step " << step << ": nothing was held, yet cloned";
                break;
              // The rebuild after step 0 makes new buffers, so step 1 lends again whatever step 0 holds.
              case Hold::Everything:  // step 1 lends a buffer, held from then on: every later step clones
                EXPECT_EQ(cloned, step < 2 ? 0u : n) << at << ", step " << step;
                break;
              case Hold::OneStep:  // lent in step 1, held during step 2 (clones), free in step 3 (lends) ...
                EXPECT_EQ(cloned, step >= 2 && step % 2 == 0 ? n : 0u) << at << ", step " << step;
                break;
              default: break;
            }
          }
        }
      }
    }
}
