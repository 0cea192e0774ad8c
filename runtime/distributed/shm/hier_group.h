// hier_group.h - the hierarchical CPU process group for several hosts: a shared-memory group (shm_group.h)
// among the ranks of each host, and a Gloo group among the host leaders (the lowest rank of each host).
// All-reduce = reduce inside the host, all-reduce between leaders, broadcast inside the host; the other
// collectives are built the same way. Issuing queues the collective for one background thread
// (queued_process_group.h), which runs it on the two sub-groups in issue order; a sub-group's error fails the
// collective and the group. abort(), or a failure, aborts both sub-groups: the ranks of this host and the
// other hosts' leaders blocked on this rank fail at once.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/distributed/queued_process_group.h"
#include "runtime/distributed/store.h"

namespace ddp::dist {

class HierProcessGroup : public QueuedProcessGroup {
 public:
  // Groups the ranks by host through the store (host_identity.h), then builds the sub-groups. Tests may
  // pass `hosts` (the host index of every rank, the same on all ranks) to split one machine into hosts.
  HierProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options,
                   const std::string& master_addr = "127.0.0.1", std::vector<int> hosts = {});
  ~HierProcessGroup() override;

  std::string backend_name() const override { return "hier"; }

  int num_hosts() const;

  struct Impl;

 protected:
  void prepare(Task& t) override;
  void run(Task& t) override;
  void on_failure(const std::string& why) override;
  void interrupt(const std::string& why) override;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::dist
