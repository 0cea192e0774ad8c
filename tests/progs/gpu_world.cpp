// gpu_world.cpp - testprog_gpu_world: one rank of a real multi-process world (under ddprun) that trains a
// small MLP with the reducer (DDP), with ZeRO-2 and with ZeRO-3, and compares each with a single-process
// reference trained in this same process on every rank's batch at once, without any group. tools/gpu_check.sh
// runs two of these on one GPU under NCCL: two processes, two CUDA contexts, two communicators, so a missing
// wait between the compute and communication streams changes the numbers here (at world 1 an in-place
// collective does nothing and hides it). The dry run runs it on the CPU under Gloo.
//
//   ddprun --nproc-per-node 2 --standalone bin/testprog_gpu_world [--device cuda] [--backend nccl]
//          [--steps 5]
//
// Prints, per rank, "gpu_world: rank R of W (...): ddp D, zero2 Z2, zero3 Z3 (max |parameter - reference|,
// bound B): PASS|FAIL" and exits 0 on PASS, 1 on FAIL or error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/core/cli.h"
#include "runtime/core/device.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;

namespace {
constexpr int64_t kRows = 8, kIn = 32;  // per rank and step
constexpr double kBound = 2e-5;         // float32 sums in another order, a few steps of SGD with momentum

// Rank r's batch at `step` (host tensors); the reference concatenates every rank's.
std::vector<float> rows(int step, int rank) {
  const auto v = Tensor::randn({kRows, kIn}, 40 + step + 100 * rank).to_double_vector();
  return {v.begin(), v.end()};
}
std::vector<int64_t> labels(int step, int rank) {
  std::vector<int64_t> y(kRows);
  for (int64_t i = 0; i < kRows; ++i) y[i] = (i + step + 3 * rank) % 10;
  return y;
}
// Ranks [first, first + count) at `step`, stacked, on `dev`.
std::pair<Tensor, Tensor> batch(int step, int first, int count, Device dev) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int r = first; r < first + count; ++r) {
    const auto xr = rows(step, r);
    const auto yr = labels(step, r);
    x.insert(x.end(), xr.begin(), xr.end());
    y.insert(y.end(), yr.begin(), yr.end());
  }
  return {Tensor::from_data<float>(x, {kRows * count, kIn}).to(dev),
          Tensor::from_data<int64_t>(y, {kRows * count}).to(dev)};
}
std::shared_ptr<models::MLP> make_model(Device dev) {
  nn::manual_seed(5);
  auto m = std::make_shared<models::MLP>(models::MLPConfig{kIn, {256, 128}, 10, DType::F32});
  m->to(dev);
  return m;
}
std::unique_ptr<optim::Optimizer> sgd(std::vector<nn::NamedTensor> ps) {
  return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
}
double max_abs_difference(const std::vector<std::vector<double>>& a,
                          const std::vector<std::vector<double>>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return INFINITY;
    for (size_t j = 0; j < a[i].size(); ++j) worst = std::max(worst, std::fabs(a[i][j] - b[i][j]));
  }
  return worst;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    std::string device_s = "auto", backend = "auto";
    int steps = 5;
    cli::Parser p("testprog_gpu_world",
                  "DDP, ZeRO-2 and ZeRO-3 in a multi-process world against a single-process reference.");
    p.add_choice("device", &device_s, {"auto", "cpu", "cuda"}, "auto: cuda when a GPU is visible");
    p.add_choice("backend", &backend, {"auto", "cpu", "shm", "gloo", "nccl"}, "process group backend");
    p.add("steps", &steps, "training steps of each run");
    p.parse(argc, argv);

    const dist::DistEnv env = dist::init_from_env();
    const bool gpu = device_s == "cuda" || (device_s == "auto" && cuda_device_count() > 0);
    DDP_CHECK(!gpu || cuda_device_count() > 0,
              "testprog_gpu_world: --device cuda but no GPU: ", cuda_unavailable_reason());
    const Device dev =
        gpu ? Device::cuda(std::max(0, dist::select_cuda_device(env.local_rank))) : Device::cpu();
    auto ctx = dist::init_distributed(env, backend);
    const int rank = ctx.group->rank(), world = ctx.group->size();
    DDPOptions opts;
    opts.bucket_cap_mb = 0.05;  // several buckets: all-reduces overlap the rest of backward
    opts.first_bucket_mb = 0.02;

    // The reference: one process, every rank's rows in one batch (mean loss over all = DDP's mean of means).
    auto reference_model = make_model(dev);
    {
      auto opt = sgd(reference_model->named_parameters());
      for (int s = 0; s < steps; ++s) {
        auto [x, y] = batch(s, 0, world, dev);
        opt->zero_grad();
        autograd::backward(ops::cross_entropy(reference_model->forward(x), y));
        opt->step();
      }
    }
    device_synchronize();
    const auto reference = ddp::testing::snapshot_params(*reference_model);

    // stage 0: the reducer; 2, 3: ShardedDataParallel (ZeRO-3 gathers on a second group, as train does).
    auto run = [&](int stage) {
      auto model = make_model(dev);
      if (stage == 0) {
        DistributedDataParallel ddp_model(model, ctx.group, opts);
        auto opt = sgd(model->named_parameters());
        for (int s = 0; s < steps; ++s) {
          auto [x, y] = batch(s, rank, 1, dev);
          opt->zero_grad();
          autograd::backward(ops::cross_entropy(ddp_model.forward(x), y));
          opt->step();
        }
        device_synchronize();
        return ddp::testing::snapshot_params(*model);
      }
      ShardOptions so;
      so.stage = stage;
      so.ddp = opts;
      if (stage == 3 && world > 1) {
        dist::ProcessGroupOptions go;
        go.name = "gpu-world-gather";
        so.gather_group = dist::new_process_group(env, ctx.store, backend, go);
      }
      ShardedDataParallel sdp(model, ctx.group, so);
      ShardedOptimizer opt(sdp, sgd);
      for (int s = 0; s < steps; ++s) {
        opt.zero_grad();  // the gradient shard accumulates over backwards as .grad does
        auto [x, y] = batch(s, rank, 1, dev);
        autograd::backward(ops::cross_entropy(sdp.forward(x), y));
        sdp.clip_grad_norm_(1e9);  // the global norm across the shards: one more collective
        opt.step();
      }
      auto whole = sdp.gathered_parameters();
      device_synchronize();
      return ddp::testing::snapshot_params(*model);
    };
    const double d0 = max_abs_difference(run(0), reference);
    const double d2 = max_abs_difference(run(2), reference);
    const double d3 = max_abs_difference(run(3), reference);
    const bool ok = d0 < kBound && d2 < kBound && d3 < kBound;
    ctx.group->barrier()->wait();
    std::printf(
        "gpu_world: rank %d of %d (backend %s, %s, %d steps): ddp %.2g, zero2 %.2g, zero3 %.2g "
        "(max |parameter - reference|, bound %.0e): %s\n",
        rank, world, ctx.group->backend_name().c_str(), dev.str().c_str(), steps, d0, d2, d3, kBound,
        ok ? "PASS" : "FAIL");
    std::fflush(stdout);
    return ok ? 0 : 1;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "testprog_gpu_world: %s\n", e.what());
    return 1;
  }
}
