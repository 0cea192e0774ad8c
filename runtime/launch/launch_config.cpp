// launch_config.cpp - ddprun's flags (torchrun's names, dash or underscore) and their resolution.
#include "runtime/launch/launch_config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "runtime/core/cli.h"
#include "runtime/core/device.h"
#include "runtime/launch/host.h"

namespace ddp::launch {

namespace {

// The raw flag values, before resolution.
struct LaunchFlags {
  std::string nproc_per_node = "1";
  std::string nnodes = "1";
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  int max_restarts = 0;
  std::string log_dir;
  int tee = 3;
  std::string local_ranks_filter;
  double grace_period = 5.0;
  std::string flight_dir;
  double stall_timeout = 600.0;
  std::string local_rank_arg = "none";
  std::string run_id;
  bool allow_many_workers = false;
  bool fault_tolerant = false;
  int replacements = 0;
  double replace_delay = 0.0;
  int min_ranks = 1;
  double heartbeat_timeout = 2.0;
};

void declare(cli::Parser& p, LaunchFlags& f) {
  p.disable_local_rank();
  p.stop_at_first_positional();
  p.add(
      "nproc-per-node", &f.nproc_per_node,
      "workers on this node: N, cpu (one per core), gpu (one per GPU) or auto (one per GPU, 1 without GPU)");
  p.add("nnodes", &f.nnodes, "number of nodes: N (or N:N; elastic ranges are not supported)");
  p.add("node-rank", &f.node_rank, "this node's index in [0, nnodes)");
  p.add("master-addr", &f.master_addr, "address of the node whose rank 0 hosts the store");
  p.add("master-port", &f.master_port, "port of the store rank 0 hosts (0: a free port, on one node)");
  p.add("standalone", &f.standalone, "single node: pick a free port on 127.0.0.1 and a random run id");
  p.add("max-restarts", &f.max_restarts, "restart all workers this many times when one fails");
  p.add("log-dir", &f.log_dir, "also write each rank's output to LOG_DIR/attempt_<k>/rank_<r>.log");
  p.add("tee", &f.tee,
        "with --log-dir: worker streams also shown on the console (0 none, 1 out, 2 err, 3 both)");
  p.add("local-ranks-filter", &f.local_ranks_filter,
        "comma-separated local ranks whose output is shown on the console (default: all)");
  p.add("grace-period", &f.grace_period, "seconds between SIGTERM and SIGKILL when stopping workers");
  p.add("flight-dir", &f.flight_dir,
        "where the ranks write their flight records (default: a temporary folder, kept and named only when "
        "the run fails; DDP_FLIGHT_RECORDER_DIR in ddprun's environment is used when set)");
  p.add("stall-timeout", &f.stall_timeout,
        "seconds a rank may wait on a collective with no progress before ddprun asks every rank for its "
        "flight record and stops the job (0: off)");
  p.add_choice_optional_value(
      "local-rank-arg", &f.local_rank_arg, {"none", "dash", "underscore"}, "dash",
      "legacy: also pass --local-rank=N (dash) or --local_rank=N (underscore) right after PROGRAM in each "
      "worker's arguments");
  p.add("allow-many-workers", &f.allow_many_workers,
        "start more than " + std::to_string(kWorkersPerCoreCap) +
            " workers per CPU core (refused otherwise: usually a typo that would exhaust memory)");
  p.add("fault-tolerant", &f.fault_tolerant,
        "per-step fault tolerance (docs/fault-tolerance.md): ddprun hosts the store and the membership "
        "coordinator; a worker that dies leaves the job, the others go on without a restart");
  p.add("replacements", &f.replacements,
        "with --fault-tolerant: start a new process for a lost worker of this node, at most this many times; "
        "it joins at a step boundary and takes its state from a live peer");
  p.add("replace-delay", &f.replace_delay, "with --replacements: seconds to wait before starting a replacement");
  p.add("min-ranks", &f.min_ranks,
        "with --fault-tolerant: the job stops, naming the lost ranks, when fewer workers are left");
  p.add("heartbeat-timeout", &f.heartbeat_timeout,
        "with --fault-tolerant: seconds a worker's heartbeat may stand still before it counts as lost");
  p.add("run-id", &f.run_id,
        "TORCHELASTIC_RUN_ID for the workers (default: random with --standalone, else none)");
}

int parse_positive(const std::string& flag, const std::string& text) {
  int v = 0;
  std::istringstream in(text);
  char extra;
  if (!(in >> v) || in >> extra || v < 1)
    throw cli::UsageError("ddprun: " + flag + " expects a positive integer, got '" + text + "'");
  return v;
}

int resolve_nproc(const std::string& text) {
  if (text == "cpu") return cpu_core_count();
  if (text == "gpu" || text == "auto") {
    int gpus = cuda_device_count();
    if (gpus > 0) return gpus;
    if (text == "auto") return 1;
    throw cli::UsageError("ddprun: --nproc-per-node gpu but no GPU is usable (" + cuda_unavailable_reason() +
                          "); use --nproc-per-node N, cpu or auto");
  }
  if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0])))
    return parse_positive("--nproc-per-node", text);
  throw cli::UsageError("ddprun: --nproc-per-node got '" + text +
                        "'; allowed: a positive integer, cpu, gpu, auto");
}

int resolve_nnodes(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) return parse_positive("--nnodes", text);
  int lo = parse_positive("--nnodes", text.substr(0, colon));
  int hi = parse_positive("--nnodes", text.substr(colon + 1));
  if (lo != hi)
    throw cli::UsageError("ddprun: --nnodes " + text +
                          ": elastic node ranges are not supported; give one number");
  return lo;
}

std::vector<int> resolve_filter(const std::string& text, int nproc) {
  std::vector<int> ranks;
  if (text.empty()) return ranks;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    int r = -1;
    std::istringstream in(item);
    char extra;
    if (!(in >> r) || in >> extra || r < 0 || r >= nproc)
      throw cli::UsageError("ddprun: --local-ranks-filter item '" + item + "' is not a local rank in [0, " +
                            std::to_string(nproc - 1) + "]");
    ranks.push_back(r);
  }
  return ranks;
}

}  // namespace

int max_plausible_workers(int cpu_cores, int gpus) {
  return std::max({kWorkersPerCoreCap * std::max(cpu_cores, 1), gpus, 8});
}

bool LaunchConfig::shows_on_console(int local_rank) const {
  return local_ranks_filter.empty() || std::find(local_ranks_filter.begin(), local_ranks_filter.end(),
                                                 local_rank) != local_ranks_filter.end();
}

std::string launch_help() {
  LaunchFlags f;
  cli::Parser p("ddprun",
                "Starts PROGRAM once per local rank with torchrun's environment (RANK, LOCAL_RANK, "
                "WORLD_SIZE, MASTER_ADDR, ...), prefixes and collects their output, and stops them all "
                "when one fails. See docs/launcher.md.");
  declare(p, f);
  return p.help();
}

std::optional<LaunchConfig> parse_launch_config(const std::vector<std::string>& args) {
  LaunchFlags f;
  cli::Parser p("ddprun", "");
  declare(p, f);
  if (!p.parse(args)) return std::nullopt;
  LaunchConfig c;
  if (p.rest().empty())
    throw cli::UsageError("ddprun: no PROGRAM given; usage: ddprun [options] PROGRAM [ARGS...]");
  c.program = p.rest();
  c.nproc_per_node = resolve_nproc(f.nproc_per_node);
  c.allow_many_workers = f.allow_many_workers;
  if (!c.allow_many_workers) {
    const int cores = cpu_core_count();
    const int cap = max_plausible_workers(cores, c.nproc_per_node > 8 ? cuda_device_count() : 0);
    if (c.nproc_per_node > cap)
      throw cli::UsageError("ddprun: --nproc-per-node " + std::to_string(c.nproc_per_node) + " would start " +
                            std::to_string(c.nproc_per_node) + " workers on this host with " +
                            std::to_string(cores) + " CPU cores (more than " +
                            std::to_string(kWorkersPerCoreCap) +
                            " per core exhausts memory and threads); use at most " + std::to_string(cap) +
                            ", or add --allow-many-workers if you mean it");
  }
  c.nnodes = resolve_nnodes(f.nnodes);
  if (f.node_rank < 0 || f.node_rank >= c.nnodes)
    throw cli::UsageError("ddprun: --node-rank " + std::to_string(f.node_rank) + " is outside [0, " +
                          std::to_string(c.nnodes - 1) + "] for --nnodes " + std::to_string(c.nnodes));
  c.node_rank = f.node_rank;
  if (f.master_port < 0 || f.master_port > 65535)
    throw cli::UsageError("ddprun: --master-port " + std::to_string(f.master_port) +
                          " is not in [1, 65535] (or 0: a free port)");
  if (f.master_addr.empty()) throw cli::UsageError("ddprun: --master-addr must not be empty");
  c.master_addr = f.master_addr;
  c.master_port = f.master_port;
  c.standalone = f.standalone;
  if (c.standalone) {
    if (c.nnodes != 1) throw cli::UsageError("ddprun: --standalone is for one node; drop it or --nnodes");
    if (p.given("master-port"))
      throw cli::UsageError("ddprun: --standalone picks its own port; drop --master-port or --standalone");
    c.master_port = pick_free_port();
  }
  if (f.master_port == 0 && !c.standalone) {  // as with --standalone: this node picks, so one node only
    if (c.nnodes != 1)
      throw cli::UsageError(
          "ddprun: --master-port 0 picks a free port on this node, which the other nodes "
          "cannot know; give every node the same port for --nnodes " +
          std::to_string(c.nnodes));
    c.master_port = pick_free_port();
  }
  if (f.max_restarts < 0) throw cli::UsageError("ddprun: --max-restarts must be >= 0");
  c.max_restarts = f.max_restarts;
  c.log_dir = f.log_dir;
  if (f.tee < 0 || f.tee > 3)
    throw cli::UsageError("ddprun: --tee must be 0, 1, 2 or 3, got " + std::to_string(f.tee));
  c.tee = f.tee;
  c.local_ranks_filter = resolve_filter(f.local_ranks_filter, c.nproc_per_node);
  if (!(f.grace_period >= 0)) throw cli::UsageError("ddprun: --grace-period must be >= 0 seconds");
  c.grace_period_s = f.grace_period;
  if (!(f.stall_timeout >= 0))
    throw cli::UsageError("ddprun: --stall-timeout must be >= 0 seconds (0 turns the watchdog off)");
  c.stall_timeout_s = f.stall_timeout;
  c.flight_dir = f.flight_dir;
  if (c.flight_dir.empty())
    if (const char* d = std::getenv("DDP_FLIGHT_RECORDER_DIR"); d && *d) c.flight_dir = d;
  c.local_rank_arg = f.local_rank_arg == "dash"         ? LocalRankArg::Dash
                     : f.local_rank_arg == "underscore" ? LocalRankArg::Underscore
                                                        : LocalRankArg::None;
  c.run_id = !f.run_id.empty() ? f.run_id : c.standalone ? random_hex(8) : "none";
  const char* token = std::getenv("DDP_RUN_TOKEN");
  if (token && *token) {
    c.token = token;
  } else {
    if (c.nnodes > 1)
      throw cli::UsageError("ddprun: --nnodes " + std::to_string(c.nnodes) +
                            " needs the same DDP_RUN_TOKEN on every node; run `export DDP_RUN_TOKEN=$(head "
                            "-c 16 /dev/urandom | "
                            "od -An -tx1 | tr -d ' \\n')` once and give that value to ddprun on all nodes");
    c.token = random_hex(16);
  }
  // One node: this launch's own identity, so the store of another job given the same port and token refuses
  // these ranks by name instead of mixing the two jobs' keys. Several nodes' ddpruns share nothing to derive a
  // common one from: no job id (not checked).
  if (c.nnodes == 1) c.job_id = random_hex(8);
  c.fault_tolerant = f.fault_tolerant;
  const bool ft_flag_alone = !f.fault_tolerant && (f.replacements != 0 || f.replace_delay != 0.0 ||
                                                  f.min_ranks != 1 || f.heartbeat_timeout != 2.0);
  if (ft_flag_alone)
    throw cli::UsageError("ddprun: --replacements, --replace-delay, --min-ranks and --heartbeat-timeout belong to "
                          "--fault-tolerant; add it");
  if (f.replacements < 0) throw cli::UsageError("ddprun: --replacements must be >= 0");
  if (!(f.replace_delay >= 0)) throw cli::UsageError("ddprun: --replace-delay must be >= 0 seconds");
  if (!(f.heartbeat_timeout > 0)) throw cli::UsageError("ddprun: --heartbeat-timeout must be > 0 seconds");
  if (f.min_ranks < 1 || f.min_ranks > c.world_size())
    throw cli::UsageError("ddprun: --min-ranks " + std::to_string(f.min_ranks) + " must be between 1 and the world size " +
                          std::to_string(c.world_size()));
  if (c.fault_tolerant && c.max_restarts > 0)
    throw cli::UsageError("ddprun: --fault-tolerant keeps the job running when a worker dies (and --replacements "
                          "starts new ones); --max-restarts restarts every worker instead: use one of them");
  c.replacements = f.replacements;
  c.replace_delay_s = f.replace_delay;
  c.min_ranks = f.min_ranks;
  c.heartbeat_timeout_s = f.heartbeat_timeout;
  c.program_path = find_program(c.program[0]);
  return c;
}

}  // namespace ddp::launch
