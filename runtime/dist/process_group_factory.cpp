// process_group_factory.cpp - backend choice and construction.
#include "runtime/dist/process_group_factory.h"

#include "runtime/core/device.h"
#include "runtime/core/error.h"
#include "runtime/dist/gloo_group.h"

#ifdef DDP_WITH_CUDA
#include "runtime/dist/cuda/nccl_group.h"
#endif

namespace ddp::dist {

std::string resolve_backend(const std::string& backend) {
  if (backend == "auto") return cuda_device_count() > 0 ? "nccl" : "gloo";
  DDP_CHECK(backend == "gloo" || backend == "nccl", "process group backend '", backend,
            "' is unknown: expected gloo, nccl or auto");
  if (backend == "nccl")
    DDP_CHECK(cuda_compiled(), "backend nccl needs a CUDA build; this one has none (",
              cuda_unavailable_reason(), "); use gloo");
  return backend;
}

std::string resolve_backend(const std::string& backend, Device params) {
  if (backend == "auto") return params.is_cuda() ? resolve_backend("nccl") : "gloo";
  return resolve_backend(backend);
}

std::shared_ptr<ProcessGroup> new_process_group(const DistEnv& env, Store& store, const std::string& backend,
                                                const ProcessGroupOptions& options) {
  std::string chosen = resolve_backend(backend);
  ProcessGroupOptions opts = options;
  // Name the group from the caller's client, whose counter advances in the same order on every rank.
  if (opts.name.empty()) opts.name = "pg" + std::to_string(store.next_group_id());
  if (chosen == "gloo")
    return std::make_shared<GlooProcessGroup>(store.clone(), env.rank, env.world_size, opts, env.master_addr);
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
