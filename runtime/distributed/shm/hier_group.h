// hier_group.h - the hierarchical CPU process group for several hosts: a shared-memory group (shm_group.h)
// among the ranks of each host, and a Gloo group among the host leaders (the lowest rank of each host).
// All-reduce = reduce inside the host, all-reduce between leaders, broadcast inside the host; the other
// collectives are built the same way. The leaders' group is Gloo (ddp.cpp's, hier_group_gloo.cpp) unless the
// caller brings its own (LeadersFactory: the ddpcpp torch backend uses PyTorch's Gloo). Issuing queues the collective for one background thread
// (queued_process_group.h), which runs it on the two sub-groups in issue order; a sub-group's error fails the
// collective and the group. abort(), or a failure, aborts both sub-groups: the ranks of this host and the
// other hosts' leaders blocked on this rank fail at once.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/distributed/queued_process_group.h"
#include "runtime/distributed/store.h"

namespace ddp::dist {

class HierProcessGroup : public QueuedProcessGroup {
 public:
  // Makes the leaders' group: `host` of `n_hosts` (the leaders numbered by host), over `store`, with
  // `options` (its name is the leaders' key prefix). Called on the leaders only, with several hosts.
  using LeadersFactory = std::function<std::unique_ptr<ProcessGroup>(
      std::shared_ptr<Store> store, int host, int n_hosts, const ProcessGroupOptions& options)>;

  // Groups the ranks by host through the store (host_identity.h), then builds the sub-groups, the leaders'
  // over Gloo (listening on the address that routes to master_addr). Tests may pass `hosts` (the host index
  // of every rank, the same on all ranks) to split one machine into hosts.
  HierProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options,
                   const std::string& master_addr = "127.0.0.1", std::vector<int> hosts = {});
  // The same with the leaders' group from `make_leaders`.
  HierProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options,
                   LeadersFactory make_leaders, std::vector<int> hosts = {});
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
