// store_setup.h - which store a job uses and where rank 0 listens, decided from the launcher environment:
// PyTorch's agent store under torchrun/torch.distributed.launch (no server of ours), otherwise our own server
// on rank 0, bound to MASTER_ADDR's interface when that address is local, and a loud warning when there is
// no run token to authenticate clients.
#pragma once
#include <memory>
#include <string>

#include "runtime/distributed/env.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_server.h"

namespace ddp::dist {

struct StorePlan {
  bool host_server = false;  // this rank starts a StoreServer
  std::string bind_host;     // where it listens first ("" = all interfaces)
  StoreAddress address;      // what every rank connects to (port 0 = the server's free port, world of one)
  std::string warning;       // to print once at start-up ("" = none)
};

StorePlan plan_store(const DistEnv& env);

// Starts the planned server: on plan.bind_host, falling back to all interfaces when that address is not one
// of this host's (e.g. a name that resolves to a NAT address). Fills in the port when it was 0.
std::unique_ptr<StoreServer> start_store_server(StorePlan& plan);

}  // namespace ddp::dist
