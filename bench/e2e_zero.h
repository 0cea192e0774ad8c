// e2e_zero.h - bench_e2e --zero {0,1,2,3}: the data-parallel wrapper and optimizer a step goes through, and
// the per-rank memory account of the run (header only: every bench/*.cpp is a program of its own).
//   stage 0: DistributedDataParallel + the optimizer
//   stage 1: DistributedDataParallel + ZeroRedundancyOptimizer(the optimizer)
//   stage 2: ShardedDataParallel(stage 2) + ShardedOptimizer(the optimizer)
//   stage 3: ShardedDataParallel(stage 3) + ShardedOptimizer; at world > 1 its all-gathers run on a second
//            process group made as `train --zero 3` makes it ("train-zero3-gather", same backend and store)
// The memory account (runtime/ddp/sharded/memory_account.h) is ShardedDataParallel::memory_account for 2/3;
// for 0/1 it is measured the same way: parameters = every parameter's nbytes, gradients = every .grad's
// nbytes when the optimizer step starts (GradientMeter: zero_grad(set_to_none) drops them after the step),
// optimizer = the state tensors of more than one element (not the step counters; stage 1: this rank's shard),
// bucket peak = the reducer's all-reduce buckets (alive for the whole run).
#pragma once
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/train_step.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/sharded/memory_account.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/optim/optimizer.h"

namespace ddp::bench {

// Forwards to an optimizer and records the bytes of the gradients present when its step starts.
class GradientMeter : public optim::Optimizer {
 public:
  explicit GradientMeter(std::unique_ptr<optim::Optimizer> inner)
      : optim::Optimizer(inner->params(), inner->lr()), inner_(std::move(inner)) {}
  void step() override {
    int64_t bytes = 0;
    for (auto& p : params())
      if (p.tensor.grad().defined()) bytes += static_cast<int64_t>(p.tensor.grad().nbytes());
    gradient_bytes_ = bytes;
    inner_->set_lr(lr());
    inner_->step();
  }
  std::map<std::string, Tensor> state() const override { return inner_->state(); }
  void load_state(const std::map<std::string, Tensor>& s, int64_t steps) override {
    inner_->load_state(s, steps);
  }
  int64_t gradient_bytes() const { return gradient_bytes_; }
  optim::Optimizer& inner() { return *inner_; }

 private:
  std::unique_ptr<optim::Optimizer> inner_;
  int64_t gradient_bytes_ = 0;
};

class E2eParallel {
 public:
  // `backend`: the name the main group was made with (the gather group of ZeRO-3 uses it too).
  E2eParallel(int zero, std::shared_ptr<nn::Module> model, const dist::DistEnv& env, dist::DistContext& ctx,
              const std::string& backend, const DDPOptions& opts, int prefetch, optim::OptimizerFactory make,
              int optimizer_bytes_per_param)
      : zero_(zero), model_(std::move(model)), k_(optimizer_bytes_per_param) {
    DDP_CHECK(zero >= 0 && zero <= 3, "bench_e2e: --zero ", zero, ": expected 0, 1, 2 or 3");
    if (zero >= 2) {
      ShardOptions so;
      so.stage = zero;
      so.ddp = opts;
      so.prefetch = prefetch;
      if (zero == 3 && ctx.group->size() > 1) {
        dist::ProcessGroupOptions go;
        go.name = "train-zero3-gather";  // as train_main makes it
        gather_group_ = dist::new_process_group(env, ctx.store, backend, go);
        so.gather_group = gather_group_;
      }
      sdp_ = std::make_unique<ShardedDataParallel>(model_, ctx.group, so);
      auto sharded = std::make_unique<ShardedOptimizer>(*sdp_, make);
      sharded_ = sharded.get();
      optimizer_ = std::move(sharded);
    } else {
      ddp_ = std::make_unique<DistributedDataParallel>(model_, ctx.group, opts);
      std::unique_ptr<optim::Optimizer> inner;
      if (zero == 1) {
        auto z =
            std::make_unique<optim::ZeroRedundancyOptimizer>(model_->named_parameters(), ctx.group, make);
        zero1_ = z.get();
        inner = std::move(z);
      } else {
        inner = make(model_->named_parameters());
      }
      auto meter = std::make_unique<GradientMeter>(std::move(inner));
      meter_ = meter.get();
      optimizer_ = std::move(meter);
    }
  }

  models::StepResult step(const std::function<data::Batch()>& next_batch, const models::StepOptions& o) {
    return sdp_ ? models::train_step(*sdp_, *optimizer_, next_batch, o)
                : models::train_step(*ddp_, *optimizer_, next_batch, o);
  }
  DistributedDataParallel& ddp() { return sdp_ ? sdp_->ddp() : *ddp_; }
  Reducer& reducer() { return ddp().reducer(); }
  // ZeRO-2/3: seconds the forward and backward waited for parameter all-gathers so far (0 for stages 0/1).
  double gather_wait_s() const { return sdp_ ? sdp_->gather_wait_s() : 0.0; }
  void reset_gather_stats() {
    if (sdp_) sdp_->reset_gather_stats();
  }
  int zero() const { return zero_; }
  std::string wrapper_name() const {
    static const char* names[] = {
        "DistributedDataParallel + optimizer", "DistributedDataParallel + ZeroRedundancyOptimizer",
        "ShardedDataParallel(stage 2) + ShardedOptimizer", "ShardedDataParallel(stage 3) + ShardedOptimizer"};
    return names[zero_];
  }

  // This rank's memory now (after a step) and the peaks so far.
  MemoryAccount memory_account() const {
    if (sdp_) return sdp_->memory_account(sharded_->state_bytes(), sharded_->state_bytes_per_param());
    MemoryAccount a;
    a.stage = zero_;
    a.world = ddp_->process_group().size();
    for (auto& p : model_->parameters()) {
      a.num_params += p.numel();
      a.parameter_bytes += static_cast<int64_t>(p.nbytes());
      a.element_bytes = static_cast<int>(dtype_size(p.dtype()));
    }
    a.optimizer_bytes_per_param = k_;
    a.gradient_bytes = meter_->gradient_bytes();
    if (zero1_) {
      a.optimizer_bytes = zero1_->local_state_bytes();
    } else {
      for (auto& [name, t] : optimizer_->state())
        if (t.defined() && t.numel() > 1) a.optimizer_bytes += static_cast<int64_t>(t.nbytes());
    }
    // DDP's all-reduce buckets live for the whole run (the reducer counts only the ones it allocates lazily).
    Reducer& r = ddp_->reducer();
    a.bucket_peak_bytes = r.bucket_bytes_peak();
    if (a.bucket_peak_bytes == 0)
      for (size_t i = 0; i < r.bucket_layout().size(); ++i)
        a.bucket_peak_bytes += r.bucket_numel(i) * a.element_bytes;
    a.resident_peak_bytes = resident_peak_bytes();
    return a;
  }

 private:
  int zero_;
  std::shared_ptr<nn::Module> model_;
  int k_;
  std::shared_ptr<dist::ProcessGroup> gather_group_;  // ZeRO-3 at world > 1
  std::unique_ptr<DistributedDataParallel> ddp_;      // stages 0/1
  std::unique_ptr<ShardedDataParallel> sdp_;          // stages 2/3
  std::unique_ptr<optim::Optimizer> optimizer_;
  GradientMeter* meter_ = nullptr;                   // stages 0/1
  optim::ZeroRedundancyOptimizer* zero1_ = nullptr;  // stage 1
  ShardedOptimizer* sharded_ = nullptr;              // stages 2/3
};

// Fields of /proc/self/status in bytes (VmRSS, RssAnon, RssFile, RssShmem: what the resident set is made of
// at the end of the run; shared memory a process touched - its own shm buffers and the peers' it read in
// place - counts in its resident set and so in VmHWM). Missing fields are left out.
inline std::map<std::string, int64_t> resident_now() {
  std::map<std::string, int64_t> out;
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    for (const char* key : {"VmRSS", "RssAnon", "RssFile", "RssShmem"})
      if (line.rfind(std::string(key) + ":", 0) == 0)
        out[key] = std::stoll(line.substr(std::strlen(key) + 1)) * 1024;
  return out;
}

// Every rank's value of x, in rank order (collective).
inline std::vector<double> every_rank(dist::ProcessGroup& pg, double x) {
  std::vector<double> v(static_cast<size_t>(pg.size()), 0.0);
  v[static_cast<size_t>(pg.rank())] = x;
  Tensor t = Tensor::from_data<double>(v, {static_cast<int64_t>(v.size())});
  host_allreduce(pg, t, dist::ReduceOp::Sum);
  const double* d = t.data<double>();
  return {d, d + v.size()};
}

// The account as bench_e2e's JSON record holds it: rank 0's figures and /proc/self/status at the end, and the
// resident peak, the measured parameter + gradient + optimizer bytes and the shared memory in the resident
// set (RssShmem at the end) of every rank.
inline nlohmann::ordered_json memory_json(const MemoryAccount& a,
                                          const std::vector<double>& resident_per_rank,
                                          const std::vector<double>& measured_per_rank,
                                          const std::vector<double>& shmem_per_rank) {
  nlohmann::ordered_json at_end;
  for (auto& [k, v] : resident_now()) at_end[k] = v;
  return {{"stage", a.stage},
          {"world", a.world},
          {"num_params", a.num_params},
          {"element_bytes", a.element_bytes},
          {"optimizer_bytes_per_param", a.optimizer_bytes_per_param},
          {"parameter_bytes", a.parameter_bytes},
          {"gradient_bytes", a.gradient_bytes},
          {"optimizer_bytes", a.optimizer_bytes},
          {"measured_bytes", a.measured_bytes()},
          {"predicted_bytes", a.predicted_bytes()},
          {"deviation", a.deviation()},
          {"bucket_peak_bytes", a.bucket_peak_bytes},
          {"gathered_peak_bytes", a.gathered_peak_bytes},
          {"resident_peak_bytes", a.resident_peak_bytes},
          {"resident_peak_bytes_per_rank", resident_per_rank},
          {"measured_bytes_per_rank", measured_per_rank},
          {"status_at_end", at_end},
          {"rss_shmem_bytes_per_rank", shmem_per_rank}};
}

}  // namespace ddp::bench
