// worker_env.h - what one worker is started with: its environment variables (torchrun's set plus
// DDP_RUN_TOKEN and thread limits) and its argument list (plus the legacy --local-rank argument).
// Pure functions of the LaunchConfig, so tests can check them without starting a process.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "runtime/launch/launch_config.h"

namespace ddp::launch {

// Variables ddprun sets for the worker with this local rank on this attempt (restart_count = 0 first).
// `inherited` is ddprun's own environment: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS are added (as 1) only when
// absent there and more than one worker runs per node.
std::map<std::string, std::string> worker_env_overrides(const LaunchConfig& c, int local_rank,
                                                        int restart_count,
                                                        const std::map<std::string, std::string>& inherited,
                                                        int incarnation = 0);
// True when worker_env_overrides() limits the thread counts (ddprun prints a one-line note then).
bool limits_threads(const LaunchConfig& c, const std::map<std::string, std::string>& inherited);
// That note, naming exactly the variables set and those kept from the environment ("" when none is set).
std::string thread_limit_note(const LaunchConfig& c, const std::map<std::string, std::string>& inherited);
// The worker's full environment: `inherited` with the overrides applied, as "KEY=VALUE" strings.
// `error_file` (when not empty) becomes TORCHELASTIC_ERROR_FILE: where a failing worker writes its message.
// `incarnation`: with --fault-tolerant, which process of this slot this is (0 first, +1 per replacement).
// `flight_dir` (when not empty) becomes DDP_FLIGHT_RECORDER_DIR, and `progress_file` DDP_FLIGHT_PROGRESS_FILE
// (the page ddprun's stall watchdog reads, runtime/distributed/flight_progress.h).
std::vector<std::string> worker_environment(const LaunchConfig& c, int local_rank, int restart_count,
                                            const std::map<std::string, std::string>& inherited,
                                            const std::string& error_file = "", const std::string& flight_dir = "",
                                            const std::string& progress_file = "", int incarnation = 0);
// PROGRAM ARGS..., with --local-rank=N / --local_rank=N right after PROGRAM in the legacy modes.
std::vector<std::string> worker_args(const LaunchConfig& c, int local_rank);
// This process's environment as a map.
std::map<std::string, std::string> current_environment();

}  // namespace ddp::launch
