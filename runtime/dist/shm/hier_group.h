// hier_group.h - the hierarchical CPU process group for several hosts: a shared-memory group (shm_group.h)
// among the ranks of each host, and a Gloo group among the host leaders (the lowest rank of each host).
// All-reduce = reduce inside the host, all-reduce between leaders, broadcast inside the host; the other
// collectives are built the same way. Issuing queues the collective for one background thread, which runs
// it on the two sub-groups in issue order; a sub-group's error fails the collective and the group.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"
#include "runtime/dist/store.h"

namespace ddp::dist {

class HierProcessGroup : public ProcessGroup {
 public:
  // Groups the ranks by host through the store (host_identity.h), then builds the sub-groups. Tests may
  // pass `hosts` (the host index of every rank, the same on all ranks) to split one machine into hosts.
  HierProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options,
                   const std::string& master_addr = "127.0.0.1", std::vector<int> hosts = {});
  ~HierProcessGroup() override;

  std::shared_ptr<Work> allreduce(CommBuffer buf, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(CommBuffer buf, int root) override;
  std::shared_ptr<Work> allgather(CommBuffer in, CommBuffer out) override;
  std::shared_ptr<Work> reduce_scatter(CommBuffer in, CommBuffer out, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> barrier() override;
  uint64_t next_sequence_number() const override;
  std::string backend_name() const override { return "hier"; }

  int num_hosts() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::dist
