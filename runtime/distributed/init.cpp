// init.cpp - store hosting by rank 0 (or PyTorch's agent store), client connection and group creation.
#include "runtime/distributed/init.h"

#include "runtime/core/log.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/distributed/store_setup.h"

namespace ddp::dist {

DistContext init_distributed(const DistEnv& env, const std::string& backend,
                             const ProcessGroupOptions& options) {
  DistContext ctx;
  ctx.env = env;
  StorePlan plan = plan_store(env);
  if (!plan.warning.empty()) DDP_LOG(Warn, plan.warning);
  if (plan.host_server) ctx.server = start_store_server(plan);
  ctx.env.master_addr = plan.address.host;
  ctx.env.master_port = plan.address.port;
  ctx.store = std::make_shared<Store>(plan.address, options.timeout);
  ctx.group = new_process_group(ctx.env, ctx.store, backend, options);
  return ctx;
}

}  // namespace ddp::dist
