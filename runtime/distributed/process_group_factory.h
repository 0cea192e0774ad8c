// process_group_factory.h - picks and builds a backend: new_process_group(env, store, backend) with backend
//   "auto": NCCL when this build has CUDA and a GPU is visible, else "cpu";
//   "cpu":  "shm" when every rank of the group is on this host (same hostname, boot id, IPC and network
//           namespace, compared through the store), else "hier" (shm inside each host, Gloo between hosts);
//           DDP_SHM=0 in the environment makes it "gloo" instead;
//   "gloo", "nccl", "shm", "hier": that backend (gloo forces TCP even on one host).
// The group talks to the store over its own connection (a clone of the given client), so the caller may keep
// using the store meanwhile.
#pragma once
#include <memory>
#include <string>

#include "runtime/core/device.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/process_group.h"
#include "runtime/distributed/store.h"

namespace ddp::dist {

std::shared_ptr<ProcessGroup> new_process_group(const DistEnv& env, Store& store, const std::string& backend,
                                                const ProcessGroupOptions& options = {});
std::shared_ptr<ProcessGroup> new_process_group(const DistEnv& env, const std::shared_ptr<Store>& store,
                                                const std::string& backend,
                                                const ProcessGroupOptions& options = {});

// What a backend name resolves to without asking the other ranks: "auto" -> "nccl" or "cpu"; checks the name.
std::string resolve_backend(const std::string& backend);
// The backend for parameters on `params`: "auto" is NCCL for CUDA parameters and "cpu" for CPU ones (a CPU
// run on a GPU host must not get NCCL, which moves device memory only); other names are checked as above.
std::string resolve_backend(const std::string& backend, Device params);

// DDP_SHM=0 disables the shared-memory backends for "auto"/"cpu" (then Gloo); unset or 1 allows them.
bool shm_allowed_from_env();

}  // namespace ddp::dist
