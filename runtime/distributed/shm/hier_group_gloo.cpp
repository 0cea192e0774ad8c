// hier_group_gloo.cpp - the hierarchical group with ddp.cpp's Gloo group between the host leaders (the usual
// one; a separate file so that hier_group.cpp builds without Gloo, as the ddpcpp torch extension needs).
#include "runtime/distributed/gloo_group.h"
#include "runtime/distributed/shm/hier_group.h"

namespace ddp::dist {

HierProcessGroup::HierProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& options, const std::string& master_addr,
                                   std::vector<int> hosts)
    : HierProcessGroup(
          std::move(store), rank, size, options,
          [master_addr](std::shared_ptr<Store> s, int host, int n_hosts, const ProcessGroupOptions& o) {
            return std::make_unique<GlooProcessGroup>(std::move(s), host, n_hosts, o, master_addr);
          },
          std::move(hosts)) {}

}  // namespace ddp::dist
