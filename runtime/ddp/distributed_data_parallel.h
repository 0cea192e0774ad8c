// distributed_data_parallel.h - the DDP wrapper: checks that every rank built the same model, broadcasts
// rank 0's parameters and buffers, runs forward with the reducer's before/after steps, and offers no_sync()
// for gradient accumulation. The gradient work itself is the Reducer's (reducer.h).
//
//   auto pg = dist::new_process_group(env, store, "auto");
//   DistributedDataParallel ddp(model, pg, {.find_unused_parameters = false});
//   Tensor loss = ops::cross_entropy(ddp.forward(x), y);
//   autograd::backward(loss);   // buckets are all-reduced while this runs; grads are averaged when it
//   returns opt.step();
#pragma once
#include <functional>
#include <memory>

#include "runtime/ddp/reducer.h"

namespace ddp {

struct DDPOptions : ReducerOptions {
  // Broadcast buffers (BatchNorm running statistics) from rank 0 before every synchronized forward.
  bool broadcast_buffers = true;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<dist::ProcessGroup> pg,
                          DDPOptions options = {});

  // module.forward(x) between before_forward() and after_forward({y}).
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  // For modules whose forward takes other arguments: fn runs the module; its outputs go to after_forward.
  Tensor forward_with(const std::function<Tensor()>& fn);

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

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  Reducer& reducer() { return *reducer_; }
  dist::ProcessGroup& process_group() { return *pg_; }
  const DDPOptions& options() const { return options_; }

 private:
  void verify_same_model();
  void broadcast_from_rank0(const std::vector<Tensor>& tensors);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<dist::ProcessGroup> pg_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace ddp
