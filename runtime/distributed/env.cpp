// env.cpp - launcher environment parsing (torchrun/ddprun, Slurm, Open MPI) and GPU selection by local rank.
#include "runtime/distributed/env.h"

#include <charconv>
#include <cstdlib>
#include <mutex>

#include "runtime/core/device.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"

#ifdef DDP_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/core/cuda_check.h"
#endif

namespace ddp::dist {

namespace {

// Reads the variables of one launcher and reports problems naming the variable.
class Vars {
 public:
  Vars(const EnvLookup& lookup, std::string launcher) : lookup_(lookup), launcher_(std::move(launcher)) {}

  std::optional<std::string> str(const std::string& name) const { return lookup_(name); }
  bool has(const std::string& name) const { return lookup_(name).has_value(); }

  // An integer variable in [lo, hi]; nullopt when unset.
  std::optional<int> integer(const std::string& name, long lo, long hi, const std::string& expected) const {
    auto v = lookup_(name);
    if (!v) return std::nullopt;
    long out = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
    if (ec != std::errc() || p != v->data() + v->size() || v->empty() || out < lo || out > hi)
      fail(name, "='", *v, "' is not valid: expected ", expected);
    return static_cast<int>(out);
  }
  int required(const std::string& name, long lo, long hi, const std::string& expected,
               const std::string& why) const {
    auto v = integer(name, lo, hi, expected);
    if (!v) fail(name, " is not set: expected ", expected, " (", why, ")");
    return *v;
  }

  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    DDP_FAIL("distributed environment (", launcher_, "): ", parts...);
  }

 private:
  const EnvLookup& lookup_;
  std::string launcher_;
};

constexpr long kMaxRanks = 1 << 24;

// MASTER_ADDR/MASTER_PORT/DDP_RUN_TOKEN shared by every launcher; a multi-node job must name the master.
void read_master(const Vars& v, DistEnv& e, bool single_node) {
  if (auto a = v.str("MASTER_ADDR")) {
    if (a->empty()) v.fail("MASTER_ADDR is empty: expected the host name or IP address of rank 0");
    e.master_addr = *a;
    // An IPv6 address may come in URL brackets: [::1].
    if (e.master_addr.size() > 2 && e.master_addr.front() == '[' && e.master_addr.back() == ']')
      e.master_addr = e.master_addr.substr(1, e.master_addr.size() - 2);
  } else if (!single_node) {
    v.fail(
        "MASTER_ADDR is not set: expected the host name or IP address of rank 0 (needed when ranks span "
        "several nodes)");
  }
  if (auto p = v.integer("MASTER_PORT", 1, 65535, "a TCP port 1..65535")) e.master_port = *p;
  if (auto t = v.str("DDP_RUN_TOKEN")) e.token = *t;
  if (auto j = v.str("DDP_JOB_ID")) e.job_id = *j;
}

// The store choice and the attempt's identity, read for every launcher.
void read_store(const Vars& v, DistEnv& e) {
  if (auto id = v.str("TORCHELASTIC_RUN_ID"); id && !id->empty()) e.run_id = *id;
  if (auto n = v.integer("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30, "a non-negative integer"))
    e.restart_count = *n;
  bool agent = false;
  if (auto a = v.str("TORCHELASTIC_USE_AGENT_STORE")) {
    if (*a == "True" || *a == "true" || *a == "1")
      agent = true;
    else if (!(*a == "False" || *a == "false" || *a == "0" || a->empty()))
      v.fail("TORCHELASTIC_USE_AGENT_STORE='", *a, "' is not valid: expected True or False");
  }
  std::string choice = v.str("DDP_STORE").value_or("auto");
  if (choice == "auto")
    e.store = agent ? StoreKind::Torch : StoreKind::Ddp;
  else if (choice == "torch")
    e.store = StoreKind::Torch;
  else if (choice == "ddp")
    e.store = StoreKind::Ddp;
  else if (choice == "agent") {
    e.store = StoreKind::Ddp;
    e.launcher_hosts_store = true;
  } else
    v.fail("DDP_STORE='", choice, "' is not valid: expected auto, ddp (rank 0 hosts our store), agent (ours, ",
           "hosted by ddprun --fault-tolerant) or torch (PyTorch's TCPStore at MASTER_ADDR:MASTER_PORT, hosted by ",
           "torchrun's agent)");
  std::string proto = v.str("DDP_TORCH_STORE_PROTOCOL").value_or("auto");
  if (proto == "auto")
    e.torch_protocol = TorchProtocol::Auto;
  else if (proto == "1" || proto == "1.13")
    e.torch_protocol = TorchProtocol::V1;
  else if (proto == "2")
    e.torch_protocol = TorchProtocol::V2;
  else
    v.fail("DDP_TORCH_STORE_PROTOCOL='", proto,
           "' is not valid: expected auto, 1 (PyTorch 1.x) or 2 (PyTorch 2.x)");
}

void check_consistent(const Vars& v, const DistEnv& e, const std::string& rank_var,
                      const std::string& size_var, const std::string& local_rank_var,
                      const std::string& local_size_var) {
  if (e.rank >= e.world_size)
    v.fail(rank_var, "=", e.rank, " is not smaller than ", size_var, "=", e.world_size,
           ": expected 0 <= rank < world size");
  if (e.local_world_size > e.world_size)
    v.fail(local_size_var, "=", e.local_world_size, " is larger than ", size_var, "=", e.world_size);
  if (e.local_rank >= e.local_world_size)
    v.fail(local_rank_var, "=", e.local_rank, " is not smaller than ", local_size_var, "=",
           e.local_world_size, ": expected 0 <= local rank < local world size");
}

DistEnv from_torchrun(const EnvLookup& lookup) {
  Vars v(lookup, "torchrun/ddprun");
  DistEnv e;
  e.launcher = "torchrun/ddprun";
  if (!v.has("WORLD_SIZE")) {
    std::string which = v.has("RANK") ? "RANK" : v.has("LOCAL_RANK") ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE";
    v.fail(which,
           " is set but WORLD_SIZE is not: expected WORLD_SIZE (the number of ranks) and RANK together");
  }
  e.world_size = v.required("WORLD_SIZE", 1, kMaxRanks, "a positive integer", "number of ranks");
  e.rank = v.required("RANK", 0, kMaxRanks, "an integer 0 <= RANK < WORLD_SIZE",
                      "WORLD_SIZE is set, so RANK must be too");
  // A hand-written single-node launch may omit the local variables: local = global then.
  e.local_rank =
      v.integer("LOCAL_RANK", 0, kMaxRanks, "an integer 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE").value_or(e.rank);
  e.local_world_size =
      v.integer("LOCAL_WORLD_SIZE", 1, kMaxRanks, "a positive integer").value_or(e.world_size);
  check_consistent(v, e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  read_master(v, e, e.local_world_size == e.world_size);
  read_store(v, e);
  return e;
}

// Slurm's SLURM_TASKS_PER_NODE: "2(x3),1" = 2,2,2,1 tasks on nodes 0..3. Returns the count on node `node`.
std::optional<int> tasks_on_node(const std::string& spec, int node) {
  int seen = 0;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    std::string item = spec.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    int count = 0, repeat = 1;
    size_t paren = item.find("(x");
    auto num = [](const std::string& s, int& out) {
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      return ec == std::errc() && p == s.data() + s.size() && !s.empty();
    };
    if (paren == std::string::npos) {
      if (!num(item, count)) return std::nullopt;
    } else {
      if (item.back() != ')' || !num(item.substr(0, paren), count) ||
          !num(item.substr(paren + 2, item.size() - paren - 3), repeat))
        return std::nullopt;
    }
    if (node < seen + repeat) return count;
    seen += repeat;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return std::nullopt;
}

DistEnv from_slurm(const EnvLookup& lookup) {
  Vars v(lookup, "slurm");
  DistEnv e;
  e.launcher = "slurm";
  e.rank =
      v.required("SLURM_PROCID", 0, kMaxRanks, "an integer 0 <= SLURM_PROCID < SLURM_NTASKS", "set by srun");
  std::string ntasks_var = v.has("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  e.world_size = v.required(ntasks_var, 1, kMaxRanks, "a positive integer",
                            "SLURM_PROCID is set, so srun should set SLURM_NTASKS too");
  e.local_rank = v.required("SLURM_LOCALID", 0, kMaxRanks, "an integer 0 <= SLURM_LOCALID",
                            "SLURM_PROCID is set, so srun should set SLURM_LOCALID too");
  // Tasks on this node: SLURM_NTASKS_PER_NODE when it is one number, else SLURM_TASKS_PER_NODE with
  // SLURM_NODEID, else an even split over SLURM_NNODES.
  std::optional<int> local;
  auto per_node = v.str("SLURM_NTASKS_PER_NODE");
  if (per_node && per_node->find_first_not_of("0123456789") == std::string::npos)
    local = v.integer("SLURM_NTASKS_PER_NODE", 1, kMaxRanks, "a positive integer");
  if (!local) {
    if (auto spec = v.str("SLURM_TASKS_PER_NODE")) {
      int node = v.integer("SLURM_NODEID", 0, kMaxRanks, "a non-negative integer").value_or(0);
      local = tasks_on_node(*spec, node);
      if (!local)
        v.fail("SLURM_TASKS_PER_NODE='", *spec, "' has no entry for SLURM_NODEID=", node,
               ": expected a list like '2(x3),1'");
    }
  }
  if (!local) {
    auto nodes = v.integer(v.has("SLURM_JOB_NUM_NODES") ? "SLURM_JOB_NUM_NODES" : "SLURM_NNODES", 1,
                           kMaxRanks, "a positive integer");
    local = nodes ? (e.world_size + *nodes - 1) / *nodes : e.world_size;
  }
  e.local_world_size = *local;
  check_consistent(v, e, "SLURM_PROCID", ntasks_var, "SLURM_LOCALID", "the tasks per node");
  auto nodelist = v.str("SLURM_JOB_NODELIST");
  if (!nodelist) nodelist = v.str("SLURM_NODELIST");
  if (!v.has("MASTER_ADDR")) {
    if (nodelist) {
      try {
        e.master_addr = slurm_first_host(*nodelist);
      } catch (const Error& err) {
        v.fail("SLURM_JOB_NODELIST='", *nodelist, "' cannot be read: ", err.what());
      }
    } else if (e.local_world_size != e.world_size) {
      v.fail(
          "neither MASTER_ADDR nor SLURM_JOB_NODELIST is set: expected one of them to name the first node");
    }
  }
  read_master(v, e, true);
  read_store(v, e);
  return e;
}

DistEnv from_openmpi(const EnvLookup& lookup) {
  Vars v(lookup, "mpirun");
  DistEnv e;
  e.launcher = "mpirun";
  e.rank = v.required("OMPI_COMM_WORLD_RANK", 0, kMaxRanks, "an integer 0 <= rank < OMPI_COMM_WORLD_SIZE",
                      "set by Open MPI's mpirun");
  e.world_size = v.required("OMPI_COMM_WORLD_SIZE", 1, kMaxRanks, "a positive integer",
                            "OMPI_COMM_WORLD_RANK is set, so mpirun should set it too");
  e.local_rank =
      v.integer("OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks, "a non-negative integer").value_or(e.rank);
  e.local_world_size =
      v.integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxRanks, "a positive integer").value_or(e.world_size);
  check_consistent(v, e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                   "OMPI_COMM_WORLD_LOCAL_SIZE");
  read_master(v, e, e.local_world_size == e.world_size);
  read_store(v, e);
  return e;
}

}  // namespace

std::string slurm_first_host(const std::string& nodelist) {
  // The first entry ends at the first comma outside brackets.
  int depth = 0;
  size_t end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    char c = nodelist[i];
    if (c == '[') {
      DDP_CHECK(depth == 0, "nested '[' at position ", i);
      depth = 1;
    } else if (c == ']') {
      DDP_CHECK(depth == 1, "unmatched ']' at position ", i);
      depth = 0;
    } else if (c == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  DDP_CHECK(depth == 0, "unclosed '['");
  std::string entry = nodelist.substr(0, end);
  DDP_CHECK(!entry.empty(), "empty node list: expected e.g. 'node[01-04],login1'");
  // Each bracket group contributes its first number (zero padding kept): "node[01-04,07]" -> "node01".
  std::string host;
  for (size_t i = 0; i < entry.size(); ++i) {
    if (entry[i] != '[') {
      host += entry[i];
      continue;
    }
    size_t close = entry.find(']', i);
    std::string group = entry.substr(i + 1, close - i - 1);
    size_t stop = group.find_first_of(",-");
    std::string first = group.substr(0, stop);
    DDP_CHECK(!first.empty() && first.find_first_not_of("0123456789") == std::string::npos, "range '[", group,
              "]' does not start with a number");
    host += first;
    i = close;
  }
  return host;
}

DistEnv init_from_env(const EnvLookup& lookup) {
  for (const char* var : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"})
    if (lookup(var)) return from_torchrun(lookup);
  if (lookup("SLURM_PROCID")) return from_slurm(lookup);
  if (lookup("OMPI_COMM_WORLD_RANK") || lookup("OMPI_COMM_WORLD_SIZE")) return from_openmpi(lookup);
  DistEnv e;  // alone: world of one
  if (auto t = lookup("DDP_RUN_TOKEN")) e.token = *t;
  return e;
}

DistEnv init_from_env() {
  return init_from_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

int select_cuda_device(int local_rank) {
  DDP_CHECK(local_rank >= 0, "select_cuda_device: local rank ", local_rank, " is negative");
#ifdef DDP_WITH_CUDA
  int count = cuda_device_count();
  if (count == 0) return -1;
  int dev = local_rank % count;
  DDP_CUDA_CHECK(cudaSetDevice(dev));
  static std::once_flag logged;
  std::call_once(logged, [&] {
    DDP_LOG(Info, "local rank ", local_rank, " uses GPU ", dev, " of ", count,
            count < local_rank + 1 ? " (more local ranks than GPUs: GPUs are shared)" : "");
  });
  return dev;
#else
  return -1;
#endif
}

}  // namespace ddp::dist
