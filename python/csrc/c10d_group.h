// c10d_group.h - a ddp.cpp ProcessGroup over a torch.distributed backend (c10d::Backend): the leaders' group of
// the hierarchical ddpcpp backend across hosts is PyTorch's own Gloo (ProcessGroupGloo, made in Python by
// ddp_cpp/torch.py), so the extension links no second Gloo next to the one inside libtorch. Each collective
// runs at once on the calling thread (the hier group's) and returns a finished Work; c10d's error becomes the
// Work's error; a collective's own timeout (ScopedCollectiveTimeout) applies. abort() aborts the c10d backend.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <memory>
#include <string>

#include "runtime/distributed/process_group.h"

namespace ddp_torch {

class C10dGroup : public ddp::dist::ProcessGroup {
 public:
  // `backend` is rank `rank` of `size`; `timeout` bounds every collective.
  C10dGroup(c10::intrusive_ptr<c10d::Backend> backend, std::chrono::milliseconds timeout);

  std::shared_ptr<ddp::dist::Work> allreduce(ddp::dist::CommBuffer buf, ddp::dist::ReduceOp op) override;
  std::shared_ptr<ddp::dist::Work> broadcast(ddp::dist::CommBuffer buf, int root) override;
  std::shared_ptr<ddp::dist::Work> allgather(ddp::dist::CommBuffer in, ddp::dist::CommBuffer out) override;
  std::shared_ptr<ddp::dist::Work> reduce_scatter(ddp::dist::CommBuffer in, ddp::dist::CommBuffer out,
                                                  ddp::dist::ReduceOp op) override;
  std::shared_ptr<ddp::dist::Work> barrier() override;
  uint64_t next_sequence_number() const override { return seq_.load(); }
  std::string backend_name() const override { return "torch-" + backend_->getBackendName(); }
  void abort(const std::string& why) override;
  bool aborted() const override { return aborted_.load(); }

 private:
  // The collective's own timeout (ScopedCollectiveTimeout) when one is set, else the group's.
  std::chrono::milliseconds timeout_now() const;
  // Runs `issue` (one c10d collective) and waits for it; the returned Work is finished, with c10d's error.
  template <class Issue>
  std::shared_ptr<ddp::dist::Work> run(const std::string& what, Issue issue);

  c10::intrusive_ptr<c10d::Backend> backend_;
  std::chrono::milliseconds timeout_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> aborted_{false};
};

}  // namespace ddp_torch
