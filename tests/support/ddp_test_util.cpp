// ddp_test_util.cpp - see ddp_test_util.h.
#include "tests/support/ddp_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>

#include "models/train_step.h"
#include "runtime/autograd/engine.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"

namespace ddp::testing {

namespace {
Tensor loss_of(const Tensor& logits, const Tensor& y) { return ops::cross_entropy(logits, y); }
optim::SGDOptions sgd_options() { return {.lr = 0.1, .momentum = 0.9}; }
}  // namespace

std::vector<std::vector<double>> snapshot_params(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& p : m.named_parameters()) out.push_back(p.tensor.to_double_vector());
  return out;
}
std::vector<std::vector<double>> snapshot_buffers(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& b : m.named_buffers()) out.push_back(b.tensor.to_double_vector());
  return out;
}

std::vector<std::vector<std::vector<double>>> train_ddp(const ModelFactory& make, const BatchFn& data,
                                                        const RunConfig& run) {
  std::vector<std::vector<std::vector<double>>> finals(run.world);
  std::vector<std::vector<std::vector<double>>> step_params(run.world), step_buffers(run.world);
  std::mutex mu;
  int mismatches = 0;
  dist::ProcessGroupOptions pg_options;
  pg_options.timeout = std::chrono::seconds(60);
  dist::run_threads(run.world, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(1000 + rank);  // different initial weights: DDP must broadcast rank 0's
    auto model = make();
    auto pg_ptr = std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
    DistributedDataParallel ddp(model, pg_ptr, run.ddp);
    optim::SGD opt(model->named_parameters(), sgd_options());
    const int64_t rows_per_step = run.per_rank * run.world * run.accumulation;
    // The DDP side runs train's own step (models/train_step.h: no_sync for all micro-steps but the last,
    // losses scaled by 1 / accumulation, zero_grad after the step), so these tests check it.
    models::StepOptions step_options;
    step_options.grad_accum = run.accumulation;
    step_options.zero_grad_set_to_none = run.set_to_none;
    for (int step = 0; step < run.steps; ++step) {
      Batch full = data(step, rows_per_step);
      int64_t micro = 0;
      auto next_micro_batch = [&] {  // this rank's slice of the micro-step's rows
        const int64_t base = micro * run.per_rank * run.world + rank * run.per_rank;
        ++micro;
        Batch mine = full.rows(base, base + run.per_rank);
        data::Batch b;
        b.x = mine.x;
        b.y = mine.y;
        return b;
      };
      models::train_step(ddp, opt, next_micro_batch, step_options);
      // All ranks bitwise identical after every step (buffers: after the broadcast the next forward does).
      ddp.before_forward();
      auto params = snapshot_params(*model);
      auto buffers = snapshot_buffers(*model);
      {
        std::lock_guard<std::mutex> g(mu);
        step_params[rank] = params;
        step_buffers[rank] = buffers;
      }
      pg.barrier()->wait();
      if (rank != 0) {
        std::lock_guard<std::mutex> g(mu);
        if (step_params[rank] != step_params[0] || step_buffers[rank] != step_buffers[0]) ++mismatches;
      }
      pg.barrier()->wait();
    }
    finals[rank] = snapshot_params(*model);
  }, pg_options, run.backend);
  EXPECT_EQ(mismatches, 0) << "ranks' parameters or buffers were not bitwise identical after a step";
  return finals;
}

std::vector<std::vector<double>> train_reference(const ModelFactory& make, const BatchFn& data,
                                                 const RunConfig& run, bool per_slice) {
  nn::manual_seed(1000);  // rank 0's initial weights
  auto model = make();
  optim::SGD opt(model->named_parameters(), sgd_options());
  const int64_t slices = run.world * run.accumulation;
  const int64_t rows_per_step = run.per_rank * slices;
  for (int step = 0; step < run.steps; ++step) {
    Batch full = data(step, rows_per_step);
    opt.zero_grad();
    if (per_slice) {
      for (int64_t s = 0; s < slices; ++s) {
        Batch part = full.rows(s * run.per_rank, (s + 1) * run.per_rank);
        autograd::backward(loss_of(model->forward(part.x), part.y) * (1.0 / static_cast<double>(slices)));
      }
    } else {
      autograd::backward(loss_of(model->forward(full.x), full.y));
    }
    opt.step();
  }
  return snapshot_params(*model);
}

double max_relative_difference(const std::vector<std::vector<double>>& a,
                               const std::vector<std::vector<double>>& b) {
  double worst = 0;
  if (a.size() != b.size()) return INFINITY;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return INFINITY;
    for (size_t j = 0; j < a[i].size(); ++j)
      worst = std::max(worst, std::fabs(a[i][j] - b[i][j]) / std::max(std::fabs(b[i][j]), 1e-3));
  }
  return worst;
}

std::shared_ptr<dist::ProcessGroup> zero3_gather_group(int zero, int rank, int world, dist::Store& store,
                                                       const std::string& backend, dist::ProcessGroupOptions options,
                                                       const std::string& name) {
  if (zero != 3) return nullptr;
  dist::DistEnv env;
  env.rank = rank;
  env.world_size = world;
  options.name = name;
  return dist::new_process_group(env, store, backend, options);
}

}  // namespace ddp::testing
