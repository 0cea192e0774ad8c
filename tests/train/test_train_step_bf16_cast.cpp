// test_train_step_bf16_cast.cpp - train_step in bf16 mode converts each weight to bf16 once per optimizer
// step (its ops::Bf16WeightCast scope over the micro-batches), not once per micro-batch, and trains bitwise
// as the same loop without the scope does: a float32 GPT, tied and untied head, with gradient accumulation.
#include <gtest/gtest.h>

#include <optional>

#include "models/gpt.h"
#include "models/train_step.h"
#include "runtime/autograd/engine.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/mixed_precision.h"

using namespace ddp;

namespace {
constexpr int64_t kLayers = 2, kAccum = 3, kSteps = 3;

std::shared_ptr<models::GPT> make_gpt(bool tied) {
  models::GPTConfig c;
  c.vocab = 13;
  c.context = 6;
  c.d_model = 8;
  c.n_head = 2;
  c.n_layer = kLayers;
  c.tie_head = tied;
  nn::manual_seed(5);
  return std::make_shared<models::GPT>(c);
}

// Micro-batch i of the run: (2, 6) tokens and their next tokens.
data::Batch batch(int64_t i) {
  std::vector<int64_t> x(12), y(12);
  for (size_t k = 0; k < x.size(); ++k) {
    x[k] = static_cast<int64_t>((k * 5 + static_cast<size_t>(i) * 3) % 13);
    y[k] = static_cast<int64_t>((k * 7 + static_cast<size_t>(i)) % 13);
  }
  data::Batch b;
  b.x = Tensor::from_data<int64_t>(x, {2, 6});
  b.y = Tensor::from_data<int64_t>(y, {2, 6});
  return b;
}

std::vector<std::vector<double>> values(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_double_vector());
  return out;
}

// train_step's loop by hand, optionally inside a cast scope: returns the parameters after kSteps steps and
// the weight conversions per step.
std::vector<std::vector<double>> by_hand(bool tied, bool scope, int64_t* casts_per_step) {
  ops::Bf16Compute bf16;
  auto model = make_gpt(tied);
  optim::AdamW opt(model->named_parameters(), {.lr = 1e-2});
  int64_t next = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const int64_t before = ops::detail::bf16_weight_casts();
    {
      std::optional<ops::Bf16WeightCast> cast;
      if (scope) cast.emplace();
      for (int64_t micro = 0; micro < kAccum; ++micro) {
        data::Batch b = batch(next++);
        Tensor loss = ops::cross_entropy(model->forward(b.x), b.y);
        autograd::backward(loss * (1.0 / static_cast<double>(kAccum)));
      }
    }
    *casts_per_step = ops::detail::bf16_weight_casts() - before;
    opt.step();
    opt.zero_grad(true);
  }
  return values(*model);
}
}  // namespace

class TrainStepBf16Cast : public ::testing::TestWithParam<bool> {};  // the parameter: a tied head

TEST_P(TrainStepBf16Cast, EachWeightOncePerStepAndBitwiseAsWithoutTheScope) {
  const bool tied = GetParam();
  // qkv, proj, fc, mlp proj per block, and fc's bias (the fused MLP's GELU epilogue takes a bf16 bias:
  // runtime/ops/mlp_bf16.h); the head (or tied wte)
  const int64_t weights = 5 * kLayers + 1;
  int64_t with_scope = 0, without = 0;
  const auto reference = by_hand(tied, false, &without);
  EXPECT_EQ(without, weights * kAccum) << "without a scope: every micro-batch's forward converts each weight";
  EXPECT_EQ(by_hand(tied, true, &with_scope), reference);
  EXPECT_EQ(with_scope, weights);

  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    ops::Bf16Compute bf16;
    auto model = make_gpt(tied);
    DistributedDataParallel ddp(
        model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg));
    optim::AdamW opt(model->named_parameters(), {.lr = 1e-2});
    int64_t next = 0;
    auto next_batch = [&] { return batch(next++); };
    models::StepOptions o;
    o.grad_accum = kAccum;
    for (int64_t step = 0; step < kSteps; ++step) {
      const int64_t before = ops::detail::bf16_weight_casts();
      models::train_step(ddp, opt, next_batch, o);
      EXPECT_EQ(ops::detail::bf16_weight_casts() - before, weights) << "step " << step;
      EXPECT_FALSE(ops::bf16_weight_cast_active()) << "the step closed its scope";
    }
    EXPECT_EQ(values(*model), reference) << "train_step at world 1 trains as the loop by hand";
  });
}

INSTANTIATE_TEST_SUITE_P(Head, TrainStepBf16Cast, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tied" : "Untied"; });
