// hier_group.cpp - host grouping, the two sub-groups and the two-level algorithms of each collective.
#include "runtime/distributed/shm/hier_group.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/distributed/collective.h"
#include "runtime/distributed/host_reduce.h"
#include "runtime/distributed/shm/host_identity.h"
#include "runtime/distributed/shm/shm_group.h"

namespace ddp::dist {

namespace {
CommBuffer view(void* data, int64_t numel, DType dtype) {
  return CommBuffer{data, numel, dtype, Device::cpu(), nullptr};
}
}  // namespace

struct HierProcessGroup::Impl {
  int rank = 0, size = 1;
  std::string prefix;
  std::vector<int> host;         // host index of every rank
  std::vector<int> local_ranks;  // global ranks on this host, ascending
  int local_index = 0;           // our position among them
  int n_hosts = 1;
  std::vector<int> leader_of_host;  // lowest global rank of each host
  std::vector<std::vector<int>> ranks_of_host;
  std::unique_ptr<ShmProcessGroup> local;
  std::unique_ptr<ProcessGroup> leaders;  // leaders only, and only with several hosts

  bool is_leader() const { return local_index == 0; }
  void execute(const CollectiveDesc& d, char* in, char* out);
  void allreduce(char* data, int64_t n, DType dt, ReduceOp op);
};

HierProcessGroup::HierProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& options, LeadersFactory make_leaders,
                                   std::vector<int> hosts)
    : QueuedProcessGroup(store.get(), rank, size, options, "hier", OnStop::RunQueued),
      impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.rank = rank;
  s.size = size;
  s.prefix = group_name(options, *store);
  if (hosts.empty()) {
    s.host = shm::host_of_ranks(*store, s.prefix + "/hier", rank, size, options.timeout);
  } else {
    DDP_CHECK(static_cast<int>(hosts.size()) == size, "hier: ", hosts.size(), " host indices for ", size,
              " ranks");
    s.host = std::move(hosts);
    for (int h : s.host) DDP_CHECK(h >= 0 && h < size, "hier: host index ", h, " out of range");
  }
  s.n_hosts = *std::max_element(s.host.begin(), s.host.end()) + 1;
  s.ranks_of_host.resize(s.n_hosts);
  for (int r = 0; r < size; ++r) s.ranks_of_host[s.host[r]].push_back(r);
  for (auto& rs : s.ranks_of_host) s.leader_of_host.push_back(rs.front());
  s.local_ranks = s.ranks_of_host[s.host[rank]];
  s.local_index =
      static_cast<int>(std::find(s.local_ranks.begin(), s.local_ranks.end(), rank) - s.local_ranks.begin());

  ProcessGroupOptions local_opts = options;
  local_opts.name = s.prefix + "/host" + std::to_string(s.host[rank]);
  s.local = std::make_unique<ShmProcessGroup>(store->clone(), s.local_index,
                                              static_cast<int>(s.local_ranks.size()), local_opts);
  if (s.n_hosts > 1 && s.is_leader()) {
    ProcessGroupOptions leader_opts = options;
    leader_opts.name = s.prefix + "/leaders";
    s.leaders = make_leaders(store->clone(), s.host[rank], s.n_hosts, leader_opts);
    DDP_CHECK(s.leaders && s.leaders->rank() == s.host[rank] && s.leaders->size() == s.n_hosts,
              "hier: the leaders' group of host ", s.host[rank], " must be rank ", s.host[rank], " of ", s.n_hosts);
  }
  DDP_LOG(Info, "hier group '", s.prefix, "': rank ", rank, " of ", size, " on host ", s.host[rank], " of ",
          s.n_hosts, " (", s.local_ranks.size(), " local ranks)");
  start_worker(s.prefix);
}

HierProcessGroup::~HierProcessGroup() {
  stop_worker();
  impl_->leaders.reset();
  impl_->local.reset();
}

int HierProcessGroup::num_hosts() const { return impl_->n_hosts; }

// Both sub-groups end what they run and tell their peers (shm: this rank failed; gloo: connections closed).
void HierProcessGroup::interrupt(const std::string& why) {
  if (impl_->leaders) impl_->leaders->abort(why);
  impl_->local->abort(why);
}

// A failure in one sub-group (a leader's gloo connection broke) would leave this host's ranks waiting in the
// other until their timeout: end both.
void HierProcessGroup::on_failure(const std::string& why) {
  interrupt("hier group failed on rank " + std::to_string(rank()) + ": " + why);
}

void HierProcessGroup::prepare(Task& t) {
  DDP_CHECK(t.in.device.is_cpu() && t.out.device.is_cpu(), "hier: ", t.desc.str(false),
            ": the hierarchical backend moves CPU memory only; use nccl for CUDA buffers");
}

void HierProcessGroup::run(Task& t) {
  const CollectiveDesc& d = t.desc;
  // The inner groups' collectives, issued from here, carry this one's own timeout.
  std::optional<ScopedCollectiveTimeout> own_timeout;
  if (d.timeout.count() > 0) own_timeout.emplace(d.timeout);
  try {
    impl_->execute(d, static_cast<char*>(t.in.data), static_cast<char*>(t.out.data));
  } catch (const std::exception& e) {
    throw Error("hier " + d.str() + " failed on rank " + std::to_string(rank()) + " of " +
                std::to_string(size()) + ": " + e.what());
  }
}

void HierProcessGroup::Impl::allreduce(char* data, int64_t n, DType dt, ReduceOp op) {
  const ReduceOp inner = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  local->allreduce(view(data, n, dt), inner)->wait();
  if (n_hosts == 1) {
    if (op == ReduceOp::Avg) divide_in_place(data, static_cast<size_t>(n), dt, size);
    return;
  }
  if (leaders) leaders->allreduce(view(data, n, dt), inner)->wait();
  local->broadcast(view(data, n, dt), 0)->wait();
  if (op == ReduceOp::Avg) divide_in_place(data, static_cast<size_t>(n), dt, size);
}

void HierProcessGroup::Impl::execute(const CollectiveDesc& d, char* in, char* out) {
  const size_t es = dtype_size(d.dtype);
  const int64_t n = d.count;
  switch (d.kind) {
    case CollectiveKind::Allreduce:
      return allreduce(out, n, d.dtype, d.op);
    case CollectiveKind::Broadcast: {
      const int root_host = host[d.root];
      const auto& rh = ranks_of_host[root_host];
      const int root_local = static_cast<int>(std::find(rh.begin(), rh.end(), d.root) - rh.begin());
      if (host[rank] == root_host) local->broadcast(view(out, n, d.dtype), root_local)->wait();
      if (leaders) leaders->broadcast(view(out, n, d.dtype), root_host)->wait();
      if (host[rank] != root_host) local->broadcast(view(out, n, d.dtype), 0)->wait();
      return;
    }
    case CollectiveKind::Allgather: {
      // Inside the host, then between leaders with every host's block padded to the largest host, then the
      // whole table to the host's ranks; finally each rank's block to its place in rank order.
      size_t max_local = 0;
      for (auto& rs : ranks_of_host) max_local = std::max(max_local, rs.size());
      const int64_t block = static_cast<int64_t>(max_local) * n;
      std::vector<char> table(static_cast<size_t>(block * n_hosts) * es);
      char* mine = table.data() + static_cast<size_t>(host[rank] * block) * es;
      local
          ->allgather(view(in, n, d.dtype), view(mine, static_cast<int64_t>(local_ranks.size()) * n, d.dtype))
          ->wait();
      if (n_hosts > 1) {
        if (leaders) {
          std::vector<char> own(mine, mine + static_cast<size_t>(block) * es);
          leaders->allgather(view(own.data(), block, d.dtype), view(table.data(), block * n_hosts, d.dtype))
              ->wait();
        }
        local->broadcast(view(table.data(), block * n_hosts, d.dtype), 0)->wait();
      }
      for (int h = 0; h < n_hosts; ++h)
        for (size_t i = 0; i < ranks_of_host[h].size(); ++i)
          std::memcpy(out + static_cast<size_t>(ranks_of_host[h][i] * n) * es,
                      table.data() + static_cast<size_t>(h * block + static_cast<int64_t>(i) * n) * es,
                      static_cast<size_t>(n) * es);
      return;
    }
    case CollectiveKind::ReduceScatter: {
      const int64_t chunk = n / size;
      std::vector<char> scratch(in, in + static_cast<size_t>(n) * es);
      allreduce(scratch.data(), n, d.dtype, d.op);
      std::memcpy(out, scratch.data() + static_cast<size_t>(rank * chunk) * es,
                  static_cast<size_t>(chunk) * es);
      return;
    }
    case CollectiveKind::Barrier:
      local->barrier()->wait();
      if (leaders) leaders->barrier()->wait();
      if (n_hosts > 1) local->barrier()->wait();
      return;
  }
}

}  // namespace ddp::dist
