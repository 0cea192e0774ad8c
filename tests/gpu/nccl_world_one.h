// nccl_world_one.h - an NCCL group of one rank on GPU 0 for the GPU tests (NCCL refuses two ranks on one
// GPU), made on the store of a run_threads(1, ...) world and named `name` in that store.
#pragma once
#include <memory>
#include <string>

#include "runtime/distributed/process_group_factory.h"

namespace ddp::testing {

inline std::shared_ptr<dist::ProcessGroup> nccl_world_one(dist::Store& store, const std::string& name) {
  dist::ProcessGroupOptions o;
  o.name = name;
  o.cuda_device = 0;
  dist::DistEnv env;
  env.rank = 0;
  env.world_size = 1;
  env.local_rank = 0;
  env.local_world_size = 1;
  return dist::new_process_group(env, store, "nccl", o);
}

}  // namespace ddp::testing
