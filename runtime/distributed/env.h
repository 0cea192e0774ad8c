// env.h - who am I in the job: rank, world size, local rank and the store's address, read from the variables
// a launcher sets (torchrun/ddprun, Slurm's srun, Open MPI's mpirun). No variables at all means a world of
// one. Missing or inconsistent variables give one ddp::Error naming the variable and what was expected.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "runtime/distributed/store.h"

namespace ddp::dist {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string token;              // DDP_RUN_TOKEN: every store client must present it ("" when unset)
  std::string job_id;             // DDP_JOB_ID (ddprun, one node): rank 0's store refuses ranks of another job
  std::string launcher = "none";  // "torchrun/ddprun", "slurm", "mpirun" or "none"
  // Which store the ranks share: ours (rank 0 hosts it) or PyTorch's, hosted by torchrun's agent when it sets
  // TORCHELASTIC_USE_AGENT_STORE=True. DDP_STORE=ddp|agent|torch|auto overrides; DDP_TORCH_STORE_PROTOCOL=1|2|auto
  // picks PyTorch's wire protocol (docs/launcher.md).
  StoreKind store = StoreKind::Ddp;
  // DDP_STORE=agent (ddprun --fault-tolerant): our store, hosted by the launcher at MASTER_ADDR:MASTER_PORT, so
  // that it outlives any rank; rank 0 hosts none.
  bool launcher_hosts_store = false;
  TorchProtocol torch_protocol = TorchProtocol::Auto;
  std::string run_id = "none";  // TORCHELASTIC_RUN_ID
  int restart_count = 0;        // TORCHELASTIC_RESTART_COUNT: the launcher's attempt number
};

// Reads a variable; nullopt when unset. Tests pass a map-backed lookup.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Parses the process environment. Precedence: RANK/WORLD_SIZE (torchrun, ddprun) over Slurm (SLURM_PROCID)
// over Open MPI (OMPI_COMM_WORLD_RANK); none of them -> rank 0 of 1.
DistEnv init_from_env();
DistEnv init_from_env(const EnvLookup& lookup);

// First host of a Slurm node list: "node[01-04],x" -> "node01", "a[1-2]-b[3,5]" -> "a1-b3".
std::string slurm_first_host(const std::string& nodelist);

// CUDA builds: makes GPU local_rank % device_count current for this thread and returns its index (logged once
// at INFO). Returns -1 when built without CUDA or when no GPU is visible.
int select_cuda_device(int local_rank);

}  // namespace ddp::dist
