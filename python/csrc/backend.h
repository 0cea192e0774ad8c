// backend.h - the c10d::Backend named "ddpcpp": torch.distributed's collectives on CPU tensors, run by ddp.cpp's
// shared-memory process group (runtime/distributed/shm) between the ranks of one host. Tensors whose dtype or
// layout ddp.cpp does not move directly are staged (float16 through float32; bool, uint8, int8, int16 through
// int32; non-contiguous tensors through a contiguous copy) and copied back when the collective completes.
// PRODUCT and the bitwise reductions run as an all-gather folded in rank order; PREMUL_SUM scales a copy of the
// input, then sums. Collectives PyTorch has that this backend does not (send/recv, gather, scatter, all_to_all,
// reduce) raise c10d's "Backend ddpcpp does not support <collective>".
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <vector>

#include "runtime/distributed/process_group.h"
#include "torch_work.h"

namespace ddp_torch {

class DdpCppBackend : public c10d::Backend {
 public:
  // Rendezvous through `store` (torch.distributed's prefixed store of this group); `timeout` bounds every
  // collective and the set-up. `hosts` (the host index of every rank; empty: one host): ranks on several
  // hosts make a hierarchical group - shm inside each host, `leaders` (PyTorch's Gloo group of the lowest
  // rank of each host, rank = host index; null on the other ranks) between hosts.
  DdpCppBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                std::chrono::milliseconds timeout, std::vector<int> hosts = {},
                c10::intrusive_ptr<c10d::Backend> leaders = {});
  ~DdpCppBackend() override;

  const std::string getBackendName() const override { return "ddpcpp"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
  // dist.split_group: a new shm group of `ranks` (this group's ranks) over the store torch.distributed gives.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // ddp.cpp's group numbers its collectives itself, from 0 on every rank: setting is a no-op (split_group and
  // new_group call it on plugin backends), getting is the number the next collective will carry.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override;
  // torch.distributed's abort of this group: ends the ddp.cpp group at once (ProcessGroup::abort): the
  // collectives in flight and later ones fail, the peers blocked on this rank fail too.
  void abort() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // The flight record of this group's recent collectives as JSON (docs/debugging.md's schema).
  std::string flight_record_json() const;
  // The ddp.cpp group underneath, for tests: "shm" (one host) or "hier" (several).
  std::string inner_backend() const { return group_->backend_name(); }
  // Whether collectives run on the issuing thread (DDP_TORCH_COLLECTIVES, backend.cpp) - "caller" - or on the
  // group's background thread - "thread".
  std::string collectives_run_on() const { return on_caller_ ? "caller" : "thread"; }

 private:
  // One collective's TorchWork: parts and after-step are added by the caller, then submit() queues it.
  c10::intrusive_ptr<TorchWork> start(c10d::OpType op, const char* name, std::vector<at::Tensor> outputs);
  c10::intrusive_ptr<c10d::Work> submit(c10::intrusive_ptr<TorchWork> w);
  // Completes `w` here when its collectives ran on this thread, else hands it to the Completer.
  void finish(const c10::intrusive_ptr<TorchWork>& w);
  // Adds to `w` the all-reduce of one tensor.
  void add_allreduce(TorchWork& w, const at::Tensor& t, const c10d::ReduceOp& op);
  void add_allgather_base(TorchWork& w, const at::Tensor& output, const at::Tensor& input);
  void add_reduce_scatter_base(TorchWork& w, const at::Tensor& output, const at::Tensor& input,
                               const c10d::ReduceOp& op);

  c10::intrusive_ptr<Options> options_;  // the timeout, for getBackendOptions and split
  const bool on_caller_;                  // collectives run on the issuing thread (DDP_TORCH_COLLECTIVES)
  std::vector<int> hosts_;                // across hosts: the host index of every rank; empty on one host
  std::unique_ptr<ddp::dist::ProcessGroup> group_;
  std::unique_ptr<Completer> completer_;
  bool coalescing_ = false;
  std::vector<std::shared_ptr<ddp::dist::Work>> coalesced_parts_;  // of the works issued while coalescing
  std::vector<at::Tensor> coalesced_outputs_;
};

}  // namespace ddp_torch
