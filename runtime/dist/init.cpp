// init.cpp - store hosting by rank 0, client connection and group creation.
#include "runtime/dist/init.h"

#include "runtime/dist/process_group_factory.h"

namespace ddp::dist {

DistContext init_distributed(const DistEnv& env, const std::string& backend,
                             const ProcessGroupOptions& options) {
  DistContext ctx;
  ctx.env = env;
  const bool loopback = env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0;
  if (env.world_size == 1) {
    ctx.env.master_addr = "127.0.0.1";
    ctx.server = std::make_unique<StoreServer>("127.0.0.1", 0, env.token);
    ctx.env.master_port = ctx.server->port();
  } else if (env.rank == 0) {
    ctx.server = std::make_unique<StoreServer>(loopback ? env.master_addr : "", env.master_port, env.token);
  }
  ctx.store = std::make_shared<Store>(ctx.env.master_addr, ctx.env.master_port, env.token, options.timeout);
  ctx.group = new_process_group(ctx.env, ctx.store, backend, options);
  return ctx;
}

}  // namespace ddp::dist
