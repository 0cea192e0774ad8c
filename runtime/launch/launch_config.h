// launch_config.h - ddprun's command line, parsed and resolved into what the supervisor needs:
// how many workers, their ranks, the rendezvous address, restart and output policy, and the program to run.
// Parsing is separate from running so the rules (torchrun-compatible flags, validation) are testable alone.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace ddp::launch {

// How the legacy torch.distributed.launch convention of passing the local rank as an argument is followed.
enum class LocalRankArg { None, Dash, Underscore };  // nothing (env only), --local-rank=N, --local_rank=N

struct LaunchConfig {
  int nproc_per_node = 1;           // workers on this node (resolved from N | cpu | gpu | auto)
  bool allow_many_workers = false;  // --allow-many-workers: skip the plausibility cap on nproc_per_node
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  int max_restarts = 0;
  std::string log_dir;  // empty: no per-rank log files
  int tee = 3;          // with log_dir: streams also shown on the console (1 out, 2 err, 3 both)
  std::vector<int> local_ranks_filter;  // empty: show every local rank's output on the console
  double grace_period_s = 5.0;          // SIGTERM -> SIGKILL delay when stopping workers
  // Flight records (docs/debugging.md): where the workers write theirs (DDP_FLIGHT_RECORDER_DIR). Empty:
  // ddprun makes a temporary folder and removes it when the run succeeds; given: kept.
  std::string flight_dir;
  // The stall watchdog: a rank waiting this long on a collective while no collective of that rank moved
  // makes ddprun ask every rank for its flight record and stop the job. 0: off.
  double stall_timeout_s = 600.0;
  LocalRankArg local_rank_arg = LocalRankArg::None;
  // --fault-tolerant (docs/fault-tolerance.md): ddprun of node 0 hosts the store (DDP_STORE=agent for the
  // workers) and the membership coordinator; a worker that dies leaves the job instead of ending it.
  bool fault_tolerant = false;
  int replacements = 0;          // lost workers of this node ddprun replaces with a new process
  double replace_delay_s = 0;    // before starting a replacement
  int min_ranks = 1;             // fewer members: the job stops
  double heartbeat_timeout_s = 2.0;
  std::string run_id;                // TORCHELASTIC_RUN_ID
  std::string job_id;                // DDP_JOB_ID: random per launch on one node ("" with --nnodes > 1)
  std::string token;                 // DDP_RUN_TOKEN: 32 hex chars, the same on every node
  std::vector<std::string> program;  // PROGRAM ARGS...
  std::string program_path;          // PROGRAM resolved through PATH (or as given when it contains '/')

  int world_size() const { return nnodes * nproc_per_node; }
  int global_rank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
  bool shows_on_console(int local_rank) const;
};

// Parses ddprun's arguments (argv without argv[0]) and resolves them: nproc keywords, --standalone's free
// port, the run token (env DDP_RUN_TOKEN or fresh random), the program's path. Returns nullopt when --help
// was asked for. Throws ddp::cli::UsageError (bad flags) or ddp::Error (e.g. program not found).
std::optional<LaunchConfig> parse_launch_config(const std::vector<std::string>& args);
// ddprun's --help text.
std::string launch_help();
// The most workers per node ddprun starts without --allow-many-workers: kWorkersPerCoreCap per CPU core (or
// one per GPU when there are more GPUs), at least 8.
inline constexpr int kWorkersPerCoreCap = 4;
int max_plausible_workers(int cpu_cores, int gpus);

}  // namespace ddp::launch
