// store_setup.cpp - the store choice (see store_setup.h).
#include "runtime/distributed/store_setup.h"

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/distributed/socket_io.h"

namespace ddp::dist {

StorePlan plan_store(const DistEnv& env) {
  StorePlan plan;
  StoreAddress& a = plan.address;
  a.host = env.master_addr;
  a.port = env.master_port;
  if (env.world_size == 1 && !env.launcher_hosts_store) {
    plan.host_server = true;  // alone: a private store on a free loopback port
    plan.bind_host = a.host = "127.0.0.1";
    a.port = 0;
    a.token = env.token;
    return plan;
  }
  if (env.store == StoreKind::Torch) {
    // torchrun's agent hosts a c10d TCPStore on MASTER_ADDR:MASTER_PORT. PyTorch's store has no
    // authentication, so DDP_RUN_TOKEN does not apply to it. Keys live under the run id and the attempt, so a
    // --max-restarts attempt never reads the keys of the one before (the agent's store outlives attempts).
    a.kind = StoreKind::Torch;
    a.torch_protocol = env.torch_protocol;
    a.key_prefix = "ddp/" + env.run_id + "/attempt_" + std::to_string(env.restart_count) + "/";
    if (!env.token.empty() && env.rank == 0)
      plan.warning =
          "DDP_RUN_TOKEN is set but does not apply: the ranks use PyTorch's store hosted by the launcher "
          "(TORCHELASTIC_USE_AGENT_STORE=True), which has no authentication";
    return plan;
  }
  a.token = env.token;
  a.job_id = env.job_id;
  if (env.rank != 0 || env.launcher_hosts_store) return plan;
  plan.host_server = true;
  // Listen on MASTER_ADDR's interface only: the other ranks connect there, nobody else needs to reach it.
  plan.bind_host = env.master_addr;
  // ... unless that is a loopback name (a Debian host name maps to 127.0.1.1) while ranks on other nodes
  // must reach it: then all interfaces.
  if (env.local_world_size < env.world_size && net::resolves_to_loopback(env.master_addr))
    plan.bind_host = "";
  if (env.token.empty())
    plan.warning =
        "no DDP_RUN_TOKEN: the store on " + env.master_addr + ":" + std::to_string(env.master_port) +
        " accepts any client that can reach it (launched by " + env.launcher +
        "). Export the same secret on every rank to authenticate them, e.g. `export DDP_RUN_TOKEN=$(od "
        "-An -tx1 -N16 /dev/urandom | tr -d ' \\n')` before the launcher (ddprun sets one itself)";
  return plan;
}

std::unique_ptr<StoreServer> start_store_server(StorePlan& plan) {
  std::unique_ptr<StoreServer> server;
  try {
    server = std::make_unique<StoreServer>(plan.bind_host, plan.address.port, plan.address.token,
                                           StoreServerLimits{}, plan.address.job_id);
  } catch (const Error& e) {
    const std::string what = e.what();
    // MASTER_ADDR names this host but not one of its interfaces (NAT, a load balancer): listen everywhere.
    if (plan.bind_host.empty() || what.find("Cannot assign requested address") == std::string::npos) throw;
    DDP_LOG(Info, "store server: ", plan.bind_host,
            " is not an address of this host; listening on all interfaces");
    plan.bind_host = "";
    server = std::make_unique<StoreServer>("", plan.address.port, plan.address.token, StoreServerLimits{},
                                           plan.address.job_id);
  }
  plan.address.port = server->port();
  return server;
}

}  // namespace ddp::dist
