// worker_env.cpp - torchrun's worker environment and the legacy local-rank argument (see worker_env.h).
#include "runtime/launch/worker_env.h"

extern char** environ;

namespace ddp::launch {

bool limits_threads(const LaunchConfig& c, const std::map<std::string, std::string>& inherited) {
  return c.nproc_per_node > 1 &&
         (!inherited.count("OMP_NUM_THREADS") || !inherited.count("OPENBLAS_NUM_THREADS"));
}

std::string thread_limit_note(const LaunchConfig& c, const std::map<std::string, std::string>& inherited) {
  if (!limits_threads(c, inherited)) return "";
  std::string set, kept;
  for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    auto it = inherited.find(var);
    if (it == inherited.end())
      set += std::string(set.empty() ? "" : " and ") + var + "=1";
    else
      kept += std::string(kept.empty() ? "" : ", ") + var + "=" + it->second;
  }
  std::string note =
      "setting " + set + " for the " + std::to_string(c.nproc_per_node) + " workers (unset before";
  if (!kept.empty()) note += "; keeping " + kept + " as exported";
  return note + "); export them to choose another value";
}

std::map<std::string, std::string> worker_env_overrides(const LaunchConfig& c, int local_rank,
                                                        int restart_count,
                                                        const std::map<std::string, std::string>& inherited,
                                                        int incarnation) {
  std::map<std::string, std::string> env;
  const std::string world = std::to_string(c.world_size());
  env["RANK"] = std::to_string(c.global_rank(local_rank));
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = world;
  env["LOCAL_WORLD_SIZE"] = std::to_string(c.nproc_per_node);
  env["GROUP_RANK"] = std::to_string(c.node_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(c.nnodes);
  env["ROLE_NAME"] = "default";
  env["ROLE_RANK"] = env["RANK"];  // one role: the role rank is the global rank
  env["ROLE_WORLD_SIZE"] = world;
  env["MASTER_ADDR"] = c.master_addr;
  env["MASTER_PORT"] = std::to_string(c.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(c.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = c.run_id;
  env["DDP_RUN_TOKEN"] = c.token;
  if (!c.job_id.empty()) env["DDP_JOB_ID"] = c.job_id;
  if (c.fault_tolerant) {
    // The store lives in ddprun (it must outlive any rank); the worker's slot is its launch rank.
    // emplace: GCC 12 -Wrestrict false positive on operator= of short literals
    env.emplace("DDP_STORE", std::string("agent"));
    env.emplace("DDP_FT", std::string(1, '1'));
    env.emplace("DDP_FT_SLOT", env["RANK"]);
    env.emplace("DDP_FT_INCARNATION", std::to_string(incarnation));
    env.emplace("DDP_FT_HEARTBEAT_TIMEOUT_MS", std::to_string(static_cast<int64_t>(c.heartbeat_timeout_s * 1000)));
    env.emplace("DDP_FT_MIN_RANKS", std::to_string(c.min_ranks));
  }
  env.emplace("DDPRUN_PREFIXES_OUTPUT", std::string(1, '1'));  // ddprun puts "[rank N] " before each line: the logger leaves its own out
  if (c.nproc_per_node > 1) {
    // Several processes each running one thread per core oversubscribe the CPU; torchrun does the same.
    for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
      if (!inherited.count(var))
        env.emplace(var, std::string(1, '1'));  // emplace: GCC 12 -Wrestrict false positive on operator=
  }
  return env;
}

std::vector<std::string> worker_environment(const LaunchConfig& c, int local_rank, int restart_count,
                                            const std::map<std::string, std::string>& inherited,
                                            const std::string& error_file, const std::string& flight_dir,
                                            const std::string& progress_file, int incarnation) {
  std::map<std::string, std::string> all = inherited;
  for (auto& [k, v] : worker_env_overrides(c, local_rank, restart_count, inherited, incarnation)) all[k] = v;
  if (!error_file.empty()) all["TORCHELASTIC_ERROR_FILE"] = error_file;
  if (!flight_dir.empty()) all["DDP_FLIGHT_RECORDER_DIR"] = flight_dir;
  if (!progress_file.empty()) all["DDP_FLIGHT_PROGRESS_FILE"] = progress_file;
  std::vector<std::string> out;
  out.reserve(all.size());
  for (auto& [k, v] : all) out.push_back(k + "=" + v);
  return out;
}

std::vector<std::string> worker_args(const LaunchConfig& c, int local_rank) {
  // Placed right after PROGRAM, before the user's arguments, as torch.distributed.launch did (so a "--" among
  // the user's arguments cannot turn it into a positional).
  std::vector<std::string> args = c.program;
  std::string n = std::to_string(local_rank);
  if (c.local_rank_arg == LocalRankArg::Dash) args.insert(args.begin() + 1, "--local-rank=" + n);
  if (c.local_rank_arg == LocalRankArg::Underscore) args.insert(args.begin() + 1, "--local_rank=" + n);
  return args;
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace ddp::launch
