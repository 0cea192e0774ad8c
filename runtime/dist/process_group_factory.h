// process_group_factory.h - picks and builds a backend: new_process_group(env, store, "gloo"|"nccl"|"auto").
// "auto" is NCCL when this build has CUDA and a GPU is visible, else Gloo. The group talks to the store over
// its own connection (a clone of the given client), so the caller may keep using the store meanwhile.
#pragma once
#include <memory>
#include <string>

#include "runtime/core/device.h"
#include "runtime/dist/env.h"
#include "runtime/dist/process_group.h"
#include "runtime/dist/store.h"

namespace ddp::dist {

std::shared_ptr<ProcessGroup> new_process_group(const DistEnv& env, Store& store, const std::string& backend,
                                                const ProcessGroupOptions& options = {});
std::shared_ptr<ProcessGroup> new_process_group(const DistEnv& env, const std::shared_ptr<Store>& store,
                                                const std::string& backend,
                                                const ProcessGroupOptions& options = {});

// The backend "auto" resolves to on this machine: "nccl" or "gloo".
std::string resolve_backend(const std::string& backend);
// The backend for parameters on `params`: "auto" is NCCL for CUDA parameters and Gloo for CPU ones (a CPU run
// on a GPU host must not get NCCL, which moves device memory only); "gloo"/"nccl" are checked as above.
std::string resolve_backend(const std::string& backend, Device params);

}  // namespace ddp::dist
