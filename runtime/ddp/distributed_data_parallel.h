// distributed_data_parallel.h - the DDP wrapper: checks that every rank built the same model, broadcasts
// rank 0's parameters and buffers, runs forward with the reducer's before/after steps, and offers no_sync()
// for gradient accumulation. The gradient work itself is the Reducer's (reducer.h).
//
//   auto pg = dist::new_process_group(env, store, "auto");
//   DistributedDataParallel ddp(model, pg, {.find_unused_parameters = false});
//   Tensor loss = ops::cross_entropy(ddp.forward(x), y);
//   autograd::backward(loss);   // buckets are all-reduced while this runs; grads are averaged when it returns
//   opt.step();
#pragma once
#include <functional>
#include <memory>

#include "runtime/ddp/deterministic_reduction.h"
#include "runtime/ddp/reducer.h"

namespace ddp {

struct DDPOptions : ReducerOptions {
  // Broadcast buffers (BatchNorm running statistics) from rank 0 before every synchronized forward.
  bool broadcast_buffers = true;
  // Join's end gives every rank the last joiner's parameters. false: ZeRO-2/3, where every rank stepped its
  // shard in every iteration (a joined one in its shadow), so the parameters already agree (and ZeRO-3's have
  // no memory outside a forward). Buffers are synchronized either way.
  bool sync_parameters_after_join = true;
  // The deterministic mode (deterministic_reduction.h, docs/determinism.md), 0: off. > 0: every backward is a
  // micro-batch kept apart (no bucket communication); finish_step() before the optimizer step replaces .grad
  // with the exact mean over the step's micro-batches of every rank - bitwise the same whichever rank ran
  // which micro-batch - and this value bounds their number per step over all ranks. Every rank calls
  // finish_step() once per step, also one with no micro-batch of its own (uneven inputs).
  int64_t deterministic_micro_batches = 0;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<dist::ProcessGroup> pg,
                          DDPOptions options = {});

  // module.forward(x) between before_forward() and after_forward({y}). In the deterministic mode it first hands
  // the previous backward's gradients to the exact mean as one micro-batch and puts the buffers back to the
  // step's start.
  Tensor forward(const Tensor& x);
  // The deterministic mode's end of a step (collective): the last micro-batch's gradients handed over, then
  // .grad = the exact mean over every rank's micro-batches of this step. Returns their number. Call
  // optimizer.zero_grad() after the optimizer step: the next micro-batch must start from no gradient.
  int64_t finish_step();
  Tensor operator()(const Tensor& x) { return forward(x); }

  // The two halves, for custom loops: buffer broadcast before; unused-parameter search after.
  void before_forward();
  void after_forward(const std::vector<Tensor>& outputs);

  // Inside the scope, backward accumulates gradients locally; the next synchronized backward reduces the sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& r) : r_(r), prev_(r.sync()) { r_.set_sync(false); }
    ~NoSyncGuard() { r_.set_sync(prev_); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Reducer& r_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*reducer_); }

  // ---- Join (join.h drives these; see docs/ddp-step.md "Join") ----
  // With join enabled, every synchronized forward first all-reduces which ranks are still training (one
  // int32 per rank), broadcasts buffers from the highest of them, and sets the gradient divisor.
  void enable_join(bool divide_by_initial_world_size);
  void disable_join();
  bool join_enabled() const { return join_enabled_; }
  // The all-reduce of the activity flags: entry r is 1 when rank r is training this iteration.
  std::vector<int32_t> exchange_activity(bool active);
  // A joined rank's part of one synchronized iteration of the others, in their order: the buffers from
  // `root` (their forward broadcasts them first), then - after the joinables' shadows of their forward
  // (Joinable::join_shadow_before_backward) - the reducer's shadow backward.
  void shadow_buffers(int root) { broadcast_buffers_from(root); }
  void shadow_backward();
  // Makes every rank's parameters and buffers equal to those of the highest rank with last_joiner = true.
  void sync_final_model(bool last_joiner);

  nn::Module& module() { return *module_; }
  Reducer& reducer() { return *reducer_; }
  dist::ProcessGroup& process_group() { return *pg_; }
  const DDPOptions& options() const { return options_; }

 private:
  void verify_same_model();
  void broadcast_from(const std::vector<Tensor>& tensors, int root);
  void broadcast_buffers_from(int root);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<dist::ProcessGroup> pg_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<DeterministicReduction> deterministic_;  // DDPOptions::deterministic_micro_batches > 0
  std::vector<Tensor> mean_grads_;  // per parameter, the .grad finish_step wrote (a backward must not add into it)
  void hand_over_micro_batch();
  bool join_enabled_ = false;
  bool divide_by_initial_world_size_ = true;
};

}  // namespace ddp
