// test_step_device_checks.cpp - train's step (models/train_step.h) and the device-side index checks
// (runtime/tensor/device_checks.h): the step's one host read raises a check that failed during the step, the
// program catches it and its next step is clean; the loss is the same double as a host sum of each
// micro-batch's loss. On the CPU the "device" op is a record on the CPU stand-in buffer, reported the way a
// kernel reports (the real ops on a GPU: tests/gpu/test_gpu_device_checks.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/index_check.h"
#include "models/mlp.h"
#include "models/train_step.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/index_errors.h"
#include "runtime/ops/loss.h"
#include "runtime/tensor/device_checks.h"

using namespace ddp;

namespace {

Tensor features(int64_t step, int64_t micro) {
  return Tensor::randn({4, 6}, static_cast<uint64_t>(100 * step + micro));
}
Tensor labels(int64_t step, int64_t micro) {
  std::vector<int64_t> v(4);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<int64_t>((i + static_cast<size_t>(step + micro)) % 3);
  return Tensor::from_data(v, {4});
}

// A token "embedding" of the step that ran on the device: the check a GPU embedding reserves, and the report
// its kernel makes (the token at position 2 is bad when `bad`).
void device_embedding_of_the_step(bool bad) {
  Tensor tokens = Tensor::from_data<int64_t>({1, 2, bad ? 77 : 3, 4}, {4});
  unsigned long long* slot =
      reserve_device_check({tokens, [shape = tokens.shape()](int64_t value, int64_t pos) {
                              return ops::embedding_index_error(shape, 10, "wte.weight", value, pos);
                            }});
  if (bad) *slot = kernels::cpu::keep_first_bad(*slot, 2);
}

}  // namespace

TEST(StepDeviceChecks, TheStepRaisesAFailedCheckAtItsEndAndTheNextStepIsClean) {
  dist::run_threads(1, [](int, dist::ProcessGroup& pg) {
    nn::manual_seed(3);
    auto model = std::make_shared<models::MLP>(models::MLPConfig{.in = 6, .hidden = {8}, .out = 3});
    auto group = std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
    DistributedDataParallel ddp(model, group, DDPOptions{});
    optim::SGD opt(model->named_parameters(), {.lr = 0.1});
    models::StepOptions o;
    o.grad_accum = 2;
    int raised = 0;
    for (int64_t step = 1; step <= 4; ++step) {
      set_device_check_step(step);
      int64_t micro = 0;
      auto next = [&] {
        device_embedding_of_the_step(step == 2 && micro == 1);
        data::Batch b;
        b.x = features(step, micro);
        b.y = labels(step, micro);
        ++micro;
        return b;
      };
      try {
        const models::StepResult r = models::train_step(ddp, opt, next, o);
        EXPECT_NE(step, 2) << "the failed check was not raised by its step";
        EXPECT_TRUE(std::isfinite(r.loss));
      } catch (const Error& e) {
        ++raised;
        const std::string m = e.what();
        EXPECT_EQ(step, 2);
        for (const char* part :
             {"embedding: index 77 at position 2", "the table 'wte.weight'", "training step 2"})
          EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
      }
      EXPECT_EQ(pending_device_checks(), 0) << "step " << step;
    }
    EXPECT_EQ(raised, 1);
    set_device_check_step(0);
  });
}

TEST(StepDeviceChecks, TheLossIsTheSameDoubleAsTheHostSumOfTheMicroBatchLosses) {
  dist::run_threads(1, [](int, dist::ProcessGroup& pg) {
    for (int64_t accum : {1, 3}) {
      nn::manual_seed(4);
      auto model = std::make_shared<models::MLP>(models::MLPConfig{.in = 6, .hidden = {8}, .out = 3});
      auto group = std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
      DistributedDataParallel ddp(model, group, DDPOptions{});
      optim::SGD opt(model->named_parameters(), {.lr = 0.0});  // parameters stay: the losses can be redone
      double host_sum = 0;
      for (int64_t m = 0; m < accum; ++m)
        host_sum += ops::cross_entropy(model->forward(features(1, m)), labels(1, m)).item();
      int64_t micro = 0;
      models::StepOptions o;
      o.grad_accum = accum;
      const models::StepResult r = models::train_step(
          ddp, opt,
          [&] {
            data::Batch b;
            b.x = features(1, micro);
            b.y = labels(1, micro);
            ++micro;
            return b;
          },
          o);
      EXPECT_EQ(r.loss, host_sum / static_cast<double>(accum)) << "grad_accum " << accum;
    }
  });
}
