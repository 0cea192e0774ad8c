// train_step.h - one training step, the only one in the codebase: `train` (models/train.cpp) and bench_e2e
// (bench/e2e.cpp) both run it. Per micro-batch: forward + cross-entropy loss, then backward (all micro-batches
// but the last under ddp.no_sync(), so gradients accumulate locally and the last backward all-reduces their
// sum); then gradient clipping, the optimizer step and zero_grad. The micro-batches run inside one
// ops::Bf16WeightCast scope (bf16 mode: each weight converted to bf16 once per step, not once per use). It
// times its three phases and leaves the learning rate, tracing of iterations and logging to the caller.
#pragma once
#include <cstdint>
#include <functional>

#include "runtime/data/data_loader.h"
#include "runtime/ddp/deterministic_reduction.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/optim/optimizer.h"

namespace ddp::models {

struct StepOptions {
  int64_t grad_accum = 1;            // micro-batches per step; each loss is scaled by 1 / grad_accum
  bool synchronize_gradients = true;  // false: every backward under no_sync (no communication at all)
  double clip_grad = 0;              // max global gradient norm; 0: off
  bool zero_grad_set_to_none = true;  // false keeps the gradient tensors (needed with bucket views)
  // After forward, backward and the optimizer, wait for the device so that asynchronous GPU work is counted
  // in the phase that queued it. Nothing to wait for on CPU. Without it a GPU step waits for the device once,
  // at its end (the loss read).
  bool wait_for_device = false;
  // The classes of the loss: 0 every logit column; else the first `loss_classes` (a padded vocabulary:
  // GPTConfig::vocab_padded, ops::CrossEntropyOptions::classes).
  int64_t loss_classes = 0;
};

// The step reads the device once, at its end: the loss, summed over the micro-batches on the device; then it
// raises any device-side index check that failed in the step (ddp::check_device_errors, after the optimizer
// step: the parameters have taken that step).
struct StepResult {
  double loss = 0;         // this rank's loss, mean over the micro-batches (before the 1 / grad_accum scale)
  double forward_s = 0;    // forward + loss, summed over micro-batches
  double backward_s = 0;   // the backward calls, the reducer's end-of-backward wait included
  double optimizer_s = 0;  // clipping + step + zero_grad
  // With clipping: the global gradient norm before it, a float64 scalar on the model's device that nobody has
  // read (on CUDA the clip runs on the device; read it, e.g. .item(), only when logging it). Else undefined.
  Tensor grad_norm;
};

// `next_batch` gives each micro-batch (x already in the model's dtype and on its device).
StepResult train_step(DistributedDataParallel& ddp, optim::Optimizer& optimizer,
                      const std::function<data::Batch()>& next_batch, const StepOptions& options);
// ZeRO-2/3: the same step through ShardedDataParallel (its forward, its no_sync, clipping by the global norm
// across the shards: sdp.clip_grad_norm_); `optimizer` is its ShardedOptimizer.
StepResult train_step(ShardedDataParallel& sdp, optim::Optimizer& optimizer,
                      const std::function<data::Batch()>& next_batch, const StepOptions& options);

// The deterministic mode (docs/determinism.md): this rank's `micro_batches` of the step (0 when it has run out
// of data: it still takes part), each forward + backward under no_sync with `before_micro_batch(i)` first
// (i: the local micro-batch's number in the step), its gradients handed to `reduction`; then the exact mean
// over every rank's micro-batches (collective), clipping, the optimizer step and zero_grad. options.grad_accum
// is not used. The loss is this rank's mean over its micro-batches (0 with none).
StepResult train_step(DistributedDataParallel& ddp, DeterministicReduction& reduction,
                      optim::Optimizer& optimizer, const std::function<data::Batch()>& next_batch,
                      int64_t micro_batches, const std::function<void(int64_t)>& before_micro_batch,
                      const StepOptions& options);
// The same at ZeRO-2/3: the micro-batches run inside one gathered scope of the whole parameters (ZeRO-3 gathers
// once per step, the same gathers on every rank whatever its number of micro-batches); the whole exact mean is
// clipped, then copied into this rank's gradient shards (ShardedDataParallel::shard_whole_gradients) for its
// ShardedOptimizer. Memory: whole parameters and gradients during the step, shards at rest.
StepResult train_step(ShardedDataParallel& sdp, DeterministicReduction& reduction,
                      optim::Optimizer& optimizer, const std::function<data::Batch()>& next_batch,
                      int64_t micro_batches, const std::function<void(int64_t)>& before_micro_batch,
                      const StepOptions& options);

}  // namespace ddp::models
