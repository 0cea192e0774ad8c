// train_step.cpp - one training step (see train_step.h).
#include "models/train_step.h"

#include <chrono>
#include <optional>

#include "runtime/autograd/engine.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/tensor/device_checks.h"
#include "runtime/trace/trace.h"

namespace ddp::models {

namespace {
// The loss of a step: over the model's classes (a padded vocabulary's real columns), averaged over the rows.
ops::CrossEntropyOptions loss_options(const StepOptions& o) {
  ops::CrossEntropyOptions c;
  c.classes = o.loss_classes;
  return c;
}

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Blocks the host until the device's current stream has run what was queued (a one-element copy to host).
void wait_for(const Tensor& probe) {
  if (probe.device().is_cuda() && probe.numel() > 0) (void)probe.slice0(0, 1).to(Device::cpu());
}

// The step's loss summed over its micro-batches on the loss's device, in float64 (each loss converted
// exactly, added in micro-batch order: the same double the host sum of loss.item() gave), so a GPU step reads
// the device once, at the end, instead of once per micro-batch.
class LossSum {
 public:
  void add(const Tensor& loss) {
    Tensor l = loss.detach().to(DType::F64);
    sum_ = sum_.defined() ? sum_ + l : l;
  }
  // The mean over `n` micro-batches (0 with none); on a GPU, the step's one host read of device data. Then
  // this thread's device-side index checks of the step are raised (Tensor::item does so for a GPU tensor; the
  // call here covers every device).
  double mean(int64_t n) const {
    if (n <= 0 || !sum_.defined()) return 0.0;
    const double total = sum_.item();
    check_device_errors();
    return total / static_cast<double>(n);
  }

 private:
  Tensor sum_;
};

// What differs between the wrappers: the forward, the reducer (no_sync) and the clipping.
struct Wrapper {
  Reducer& reducer;
  std::function<Tensor(const Tensor&)> forward;
  std::function<Tensor(double)> clip;  // returns the norm before clipping, unread (a device scalar on CUDA)
  // bf16 weight copies kept for the step's micro-batches (ops::Bf16WeightCast); false for ZeRO-3, whose
  // gathered parameters are freed after each use (the copies would keep all of them, in bf16, for the step).
  bool cache_bf16_weights = true;
};

StepResult step_with(const Wrapper& w, optim::Optimizer& optimizer,
                     const std::function<data::Batch()>& next_batch, const StepOptions& o) {
  StepResult r;
  LossSum loss_sum;
  Tensor probe;  // a tensor on the model's device, for wait_for_device
  // bf16 mode: each weight converted to bf16 once for all micro-batches; closed before the optimizer step.
  std::optional<ops::Bf16WeightCast> weight_cast(std::in_place, w.cache_bf16_weights);
  for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
    data::Batch b;
    {
      trace::TraceScope ts("data", "data");  // the loader's batch, its dtype conversion and device copy
      b = next_batch();
    }
    probe = b.x;
    std::optional<DistributedDataParallel::NoSyncGuard> no_sync;
    if (!o.synchronize_gradients || micro + 1 < o.grad_accum) no_sync.emplace(w.reducer);
    const auto t0 = Clock::now();
    Tensor loss;
    {
      trace::TraceScope ts("forward", "forward");
      loss = ops::cross_entropy(w.forward(b.x), b.y, loss_options(o));
      loss_sum.add(loss);  // no host read: the loss is read once, at the end of the step
      if (o.wait_for_device) wait_for(probe);
    }
    const auto t1 = Clock::now();
    if (o.grad_accum > 1) loss = loss * (1.0 / static_cast<double>(o.grad_accum));
    {
      trace::TraceScope ts("backward", "backward");
      autograd::backward(loss);
      if (o.wait_for_device) wait_for(probe);
    }
    const auto t2 = Clock::now();
    r.forward_s += seconds(t0, t1);
    r.backward_s += seconds(t1, t2);
  }
  weight_cast.reset();
  const auto t0 = Clock::now();
  if (o.clip_grad > 0) {
    trace::TraceScope ts("clip", "clip_grad_norm_");
    r.grad_norm = w.clip(o.clip_grad);
  }
  {
    trace::TraceScope ts("optimizer", "optimizer");
    optimizer.step();
    if (o.wait_for_device) wait_for(probe);
  }
  {
    trace::TraceScope ts("zero_grad", "zero_grad");
    optimizer.zero_grad(o.zero_grad_set_to_none);
  }
  r.optimizer_s = seconds(t0, Clock::now());
  r.loss = loss_sum.mean(o.grad_accum);
  return r;
}
}  // namespace

StepResult train_step(DistributedDataParallel& ddp, optim::Optimizer& optimizer,
                      const std::function<data::Batch()>& next_batch, const StepOptions& o) {
  Wrapper w{ddp.reducer(), [&ddp](const Tensor& x) { return ddp.forward(x); },
            [&ddp](double max_norm) {
              return optim::clip_grad_norm_tensor_(ddp.module().parameters(), max_norm);
            }};
  return step_with(w, optimizer, next_batch, o);
}

StepResult train_step(ShardedDataParallel& sdp, optim::Optimizer& optimizer,
                      const std::function<data::Batch()>& next_batch, const StepOptions& o) {
  Wrapper w{sdp.reducer(), [&sdp](const Tensor& x) { return sdp.forward(x); },
            [&sdp](double max_norm) { return sdp.clip_grad_norm_tensor_(max_norm); }, sdp.stage() < 3};
  return step_with(w, optimizer, next_batch, o);
}

namespace {
// The deterministic step through either wrapper: `forward`, the reducer for no_sync, the whole parameters
// (clipping), and `after_mean` (ZeRO-2/3: the whole mean into the gradient shards).
StepResult deterministic_step(Reducer& reducer, const std::function<Tensor(const Tensor&)>& forward,
                              const std::vector<Tensor>& params, const std::function<void()>& after_mean,
                              DeterministicReduction& reduction, optim::Optimizer& optimizer,
                              const std::function<data::Batch()>& next_batch, int64_t micro_batches,
                              const std::function<void(int64_t)>& before_micro_batch, const StepOptions& o) {
  StepResult r;
  LossSum loss_sum;
  // Each weight converted to bf16 once for the step (bf16 mode); ZeRO-3 here holds whole parameters for the
  // step anyway (one gathered scope). Closed before the mean, clipping and the optimizer step.
  std::optional<ops::Bf16WeightCast> weight_cast(std::in_place);
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    data::Batch b;
    {
      trace::TraceScope ts("data", "data");
      b = next_batch();
    }
    DistributedDataParallel::NoSyncGuard no_sync(reducer);  // the exact mean is the only gradient traffic
    reduction.before_micro_batch();
    if (before_micro_batch) before_micro_batch(micro);
    const auto t0 = Clock::now();
    Tensor loss;
    {
      trace::TraceScope ts("forward", "forward");
      loss = ops::cross_entropy(forward(b.x), b.y, loss_options(o));
      loss_sum.add(loss);
    }
    const auto t1 = Clock::now();
    {
      trace::TraceScope ts("backward", "backward");
      autograd::backward(loss);
      reduction.end_micro_batch();
    }
    r.forward_s += seconds(t0, t1);
    r.backward_s += seconds(t1, Clock::now());
  }
  weight_cast.reset();
  const auto t0 = Clock::now();
  {
    trace::TraceScope ts("allreduce", "exact micro-batch mean");
    reduction.finish_step();
  }
  r.backward_s += seconds(t0, Clock::now());
  const auto t1 = Clock::now();
  if (o.clip_grad > 0) {  // over the whole mean, in parameter order: the same on every rank and world size
    trace::TraceScope ts("clip", "clip_grad_norm_");
    r.grad_norm = optim::clip_grad_norm_tensor_(params, o.clip_grad);
  }
  if (after_mean) after_mean();
  {
    trace::TraceScope ts("optimizer", "optimizer");
    optimizer.step();
  }
  {
    trace::TraceScope ts("zero_grad", "zero_grad");
    optimizer.zero_grad(true);
  }
  r.optimizer_s = seconds(t1, Clock::now());
  r.loss = loss_sum.mean(micro_batches);
  return r;
}
}  // namespace

StepResult train_step(DistributedDataParallel& ddp, DeterministicReduction& reduction,
                      optim::Optimizer& optimizer, const std::function<data::Batch()>& next_batch,
                      int64_t micro_batches, const std::function<void(int64_t)>& before_micro_batch,
                      const StepOptions& o) {
  return deterministic_step(
      ddp.reducer(), [&ddp](const Tensor& x) { return ddp.forward(x); }, ddp.module().parameters(), {},
      reduction, optimizer, next_batch, micro_batches, before_micro_batch, o);
}

StepResult train_step(ShardedDataParallel& sdp, DeterministicReduction& reduction,
                      optim::Optimizer& optimizer, const std::function<data::Batch()>& next_batch,
                      int64_t micro_batches, const std::function<void(int64_t)>& before_micro_batch,
                      const StepOptions& o) {
  // Every parameter gathered once for the step's micro-batches (ZeRO-3: one agreed set of gathers on every
  // rank, whatever its number of micro-batches; ZeRO-2: its step's gathers waited for), and the module run
  // inside that scope, which issues no gather of its own.
  std::optional<ShardedDataParallel::GatheredScope> whole;
  whole.emplace(sdp);
  return deterministic_step(
      sdp.reducer(), [&sdp](const Tensor& x) { return sdp.module().forward(x); }, sdp.module().parameters(),
      [&] {
        whole.reset();
        sdp.shard_whole_gradients();
      },
      reduction, optimizer, next_batch, micro_batches, before_micro_batch, o);
}

}  // namespace ddp::models
