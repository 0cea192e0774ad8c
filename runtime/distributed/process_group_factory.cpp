// process_group_factory.cpp - backend choice (including the same-host check through the store) and
// construction.
#include "runtime/distributed/process_group_factory.h"

#include <cstdlib>
#include <cstring>

#include "runtime/core/device.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/distributed/gloo_group.h"
#include "runtime/distributed/shm/hier_group.h"
#include "runtime/distributed/shm/host_identity.h"
#include "runtime/distributed/shm/shm_group.h"

#ifdef DDP_WITH_CUDA
#include "runtime/distributed/cuda/nccl_group.h"
#endif

namespace ddp::dist {

std::string resolve_backend(const std::string& backend) {
  if (backend == "auto") return cuda_device_count() > 0 ? "nccl" : "cpu";
  DDP_CHECK(backend == "gloo" || backend == "nccl" || backend == "shm" || backend == "hier" || backend == "cpu",
            "process group backend '", backend, "' is unknown: expected gloo, nccl, shm, hier, cpu or auto");
  if (backend == "nccl")
    DDP_CHECK(cuda_compiled(), "backend nccl needs a CUDA build; this one has none (",
              cuda_unavailable_reason(), "); use gloo");
  return backend;
}

std::string resolve_backend(const std::string& backend, Device params) {
  if (backend == "auto") return params.is_cuda() ? resolve_backend("nccl") : "cpu";
  return resolve_backend(backend);
}

bool shm_allowed_from_env() {
  const char* v = std::getenv("DDP_SHM");
  if (!v || !*v || std::strcmp(v, "1") == 0) return true;
  DDP_CHECK(std::strcmp(v, "0") == 0, "DDP_SHM='", v, "' is not valid: expected 0 (use Gloo) or 1");
  return false;
}

std::shared_ptr<ProcessGroup> new_process_group(const DistEnv& env, Store& store, const std::string& backend,
                                                const ProcessGroupOptions& options) {
  std::string chosen = resolve_backend(backend);
  ProcessGroupOptions opts = options;
  // Name the group from the caller's client, whose counter advances in the same order on every rank.
  opts.name = group_name(opts, store);
  if (chosen == "cpu") {
    if (!shm_allowed_from_env()) {
      chosen = "gloo";
    } else {
      auto hosts = shm::host_of_ranks(store, opts.name, env.rank, env.world_size, opts.timeout);
      bool one_host = true;
      for (int h : hosts) one_host = one_host && h == 0;
      chosen = one_host ? "shm" : "hier";
      if (env.rank == 0) DDP_LOG(Info, "process group '", opts.name, "': backend ", chosen);
    }
  }
  if (chosen == "gloo")
    return std::make_shared<GlooProcessGroup>(store.clone(), env.rank, env.world_size, opts, env.master_addr);
  if (chosen == "shm") return std::make_shared<ShmProcessGroup>(store.clone(), env.rank, env.world_size, opts);
  if (chosen == "hier")
    return std::make_shared<HierProcessGroup>(store.clone(), env.rank, env.world_size, opts, env.master_addr);
#ifdef DDP_WITH_CUDA
  return std::make_shared<NcclProcessGroup>(store.clone(), env.rank, env.world_size, env.local_rank, opts);
#else
  DDP_FAIL("backend nccl needs a CUDA build");
#endif
}

std::shared_ptr<ProcessGroup> new_process_group(const DistEnv& env, const std::shared_ptr<Store>& store,
                                                const std::string& backend,
                                                const ProcessGroupOptions& options) {
  DDP_CHECK(store != nullptr, "new_process_group: the store is null");
  return new_process_group(env, *store, backend, options);
}

}  // namespace ddp::dist
