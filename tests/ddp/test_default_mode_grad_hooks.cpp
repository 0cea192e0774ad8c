// test_default_mode_grad_hooks.cpp - DDP's default mode (no gradient_as_bucket_view) hands no bucket memory
// to user hooks (docs/ddp-step.md, "gradient destination"): a post-accumulate-grad hook of the user's that
// keeps the parameter's .grad sees this rank's own, un-averaged gradient, and what it kept is not changed by
// the next step. The reducer offers a parameter's bucket slot as gradient destination only while its own hook
// is the parameter's only post-accumulate hook; the parameters without a user hook still get theirs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"

using namespace ddp;

namespace {
constexpr int kSteps = 4;  // past the bucket rebuild after the first

std::shared_ptr<models::MLP> make_mlp() {
  nn::manual_seed(11);
  return std::make_shared<models::MLP>(models::MLPConfig{12, {16, 8}, 5, DType::F64});
}

Tensor input(int rank, int step) { return Tensor::randn({6, 12}, 500 + 10 * step + rank, DType::F64); }
Tensor targets() { return Tensor::from_data<int64_t>({0, 1, 2, 3, 4, 0}, {6}); }

// What a user's hook on one parameter saw and kept.
struct Kept {
  std::vector<Tensor> grad;                     // per step: the .grad tensor the hook kept
  std::vector<std::vector<double>> at_hook;     // per step: its values when the hook ran
  std::vector<std::vector<double>> after_step;  // per step: its values right after that step's backward
};

void run(int world, const std::string& backend, bool hook_before_ddp) {
  const std::string where = "world " + std::to_string(world) + ", " + backend + ", user hook registered " +
                            (hook_before_ddp ? "before" : "after") + " DDP";
  dist::ProcessGroupOptions pgo;
  pgo.timeout = std::chrono::seconds(10);
  dist::run_threads(
      world,
      [&](int rank, dist::ProcessGroup& pg) {
        auto model = make_mlp();
        auto replica = make_mlp();  // the same initial parameters: this rank's local gradients
        auto params = model->named_parameters();
        // A user hook on every other parameter (layers.0.weight, layers.1.weight, ...): keeps .grad.
        std::vector<size_t> hooked;
        for (size_t i = 0; i < params.size(); i += 2) hooked.push_back(i);
        std::vector<Kept> kept(params.size());
        int step = 0;
        const int user_key = 0;
        auto add_hooks = [&] {
          for (size_t i : hooked)
            params[i].tensor.impl()->add_post_accumulate_hook(&user_key, [&, i](TensorImpl& p) {
              Tensor g(p.grad);
              kept[i].grad.push_back(g);
              kept[i].at_hook.push_back(g.to_double_vector());
            });
        };
        if (hook_before_ddp) add_hooks();
        DDPOptions o;
        o.first_bucket_mb = o.bucket_cap_mb = 1e-6;  // one parameter per bucket
        DistributedDataParallel ddp(
            model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg), o);
        if (!hook_before_ddp) add_hooks();
        for (step = 0; step < kSteps; ++step) {
          for (auto& p : params) p.tensor.set_grad(Tensor());  // zero_grad(set_to_none), the default
          autograd::backward(ops::cross_entropy(ddp.forward(input(rank, step)), targets()));
          for (size_t i : hooked) kept[i].after_step.push_back(kept[i].grad.back().to_double_vector());
          // Parameters without a user hook still get their gradient written straight into the bucket.
          EXPECT_EQ(ddp.reducer().last_stats().num_gradients_copied, hooked.size())
              << where << ", rank " << rank << ", step " << step;
        }
        // No optimizer step: the parameters stay the replica's, whose gradient is this rank's own.
        auto rp = replica->named_parameters();
        for (step = 0; step < kSteps; ++step) {
          for (auto& p : rp) p.tensor.set_grad(Tensor());
          autograd::backward(ops::cross_entropy(replica->forward(input(rank, step)), targets()));
          for (size_t i : hooked) {
            const std::string at = where + ", rank " + std::to_string(rank) + ", step " +
                                   std::to_string(step) + ", " + params[i].name;
            ASSERT_EQ(kept[i].at_hook.size(), static_cast<size_t>(kSteps)) << at;
            const std::vector<double> local = rp[i].tensor.grad().to_double_vector();
            const std::vector<double>& seen = kept[i].at_hook[static_cast<size_t>(step)];
            ASSERT_EQ(seen.size(), local.size()) << at;
            for (size_t k = 0; k < local.size(); ++k)
              ASSERT_NEAR(seen[k], local[k], 1e-12 * std::max(1.0, std::fabs(local[k])))
                  << at << " element " << k << ": the hook did not see the local, un-averaged gradient";
            EXPECT_EQ(kept[i].grad[static_cast<size_t>(step)].to_double_vector(),
                      kept[i].after_step[static_cast<size_t>(step)])
                << at << ": the .grad the hook kept was changed by a later step (bucket memory)";
          }
        }
      },
      pgo, backend);
}
}  // namespace

TEST(DefaultModeGradHooks, AUserHookThatKeepsTheGradSeesTheLocalGradientAndLaterStepsLeaveItAlone) {
  for (int world : {1, 2})
    for (const char* backend : {"gloo", "shm"})
      for (bool before : {false, true}) {
        run(world, backend, before);
        if (HasFatalFailure()) return;
      }
}
