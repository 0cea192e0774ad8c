// init.h - one call from launcher environment to a working process group: rank 0 hosts the store on
// MASTER_ADDR:MASTER_PORT (as ddprun/torchrun expect), every rank connects with DDP_RUN_TOKEN and builds the
// group.
#pragma once
#include <memory>
#include <string>

#include "runtime/distributed/env.h"
#include "runtime/distributed/process_group.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_server.h"

namespace ddp::dist {

// Owns the pieces; destroys the group first, then the store client, then (rank 0) the server.
struct DistContext {
  DistEnv env;
  std::unique_ptr<StoreServer> server;  // rank 0 only
  std::shared_ptr<Store> store;
  std::shared_ptr<ProcessGroup> group;
};

// A world of one needs no launcher: its store listens on a free loopback port. Under torchrun's agent store
// (TORCHELASTIC_USE_AGENT_STORE=True) every rank connects to PyTorch's store. Otherwise rank 0 listens on
// MASTER_ADDR:MASTER_PORT (store_setup.h). Store calls use options.timeout.
DistContext init_distributed(const DistEnv& env, const std::string& backend = "auto",
                             const ProcessGroupOptions& options = {});

}  // namespace ddp::dist
