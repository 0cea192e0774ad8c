// hier_group.cpp - host grouping, the two sub-groups and the two-level algorithms of each collective.
#include "runtime/dist/shm/hier_group.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/dist/collective.h"
#include "runtime/dist/gloo_group.h"
#include "runtime/dist/host_reduce.h"
#include "runtime/dist/shm/host_identity.h"
#include "runtime/dist/shm/shm_group.h"

namespace ddp::dist {

namespace {
struct Task {
  CollectiveDesc desc;
  CommBuffer in, out;
  std::shared_ptr<Work> work;
};
CommBuffer view(void* data, int64_t numel, DType dtype) { return CommBuffer{data, numel, dtype, Device::cpu(), nullptr}; }
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
  std::unique_ptr<GlooProcessGroup> leaders;  // leaders only, and only with several hosts

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  uint64_t next_seq = 0;
  bool stopping = false;
  std::string broken;
  std::thread worker;

  bool is_leader() const { return local_index == 0; }
  std::shared_ptr<Work> enqueue(CollectiveDesc d, CommBuffer in, CommBuffer out);
  void loop();
  void execute(const CollectiveDesc& d, char* in, char* out);
  void allreduce(char* data, int64_t n, DType dt, ReduceOp op);
};

HierProcessGroup::HierProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& options, const std::string& master_addr,
                                   std::vector<int> hosts)
    : ProcessGroup(rank, size), impl_(std::make_unique<Impl>()) {
  DDP_CHECK(store != nullptr, "hier: a process group needs a store");
  DDP_CHECK(size >= 1 && rank >= 0 && rank < size, "hier: rank ", rank, " of world size ", size,
            " is invalid: expected 0 <= rank < size");
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
  s.local_index = static_cast<int>(std::find(s.local_ranks.begin(), s.local_ranks.end(), rank) - s.local_ranks.begin());

  ProcessGroupOptions local_opts = options;
  local_opts.name = s.prefix + "/host" + std::to_string(s.host[rank]);
  s.local = std::make_unique<ShmProcessGroup>(store->clone(), s.local_index,
                                              static_cast<int>(s.local_ranks.size()), local_opts);
  if (s.n_hosts > 1 && s.is_leader()) {
    ProcessGroupOptions leader_opts = options;
    leader_opts.name = s.prefix + "/leaders";
    s.leaders = std::make_unique<GlooProcessGroup>(store->clone(), s.host[rank], s.n_hosts, leader_opts,
                                                   master_addr);
  }
  DDP_LOG(Info, "hier group '", s.prefix, "': rank ", rank, " of ", size, " on host ", s.host[rank], " of ",
          s.n_hosts, " (", s.local_ranks.size(), " local ranks)");
  s.worker = std::thread([&s] { s.loop(); });
}

HierProcessGroup::~HierProcessGroup() {
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->worker.join();
  impl_->leaders.reset();
  impl_->local.reset();
}

int HierProcessGroup::num_hosts() const { return impl_->n_hosts; }

uint64_t HierProcessGroup::next_sequence_number() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->next_seq;
}

std::shared_ptr<Work> HierProcessGroup::Impl::enqueue(CollectiveDesc d, CommBuffer in, CommBuffer out) {
  DDP_CHECK(in.device.is_cpu() && out.device.is_cpu(), "hier: ", d.str(false),
            ": the hierarchical backend moves CPU memory only; use nccl for CUDA buffers");
  Task t;
  t.in = std::move(in);
  t.out = std::move(out);
  std::lock_guard<std::mutex> g(mu);
  DDP_CHECK(!stopping, "hier: ", d.str(false), " issued while the process group is being destroyed");
  d.seq = next_seq++;
  t.desc = d;
  t.work = std::make_shared<Work>(d.str());
  auto w = t.work;
  queue.push_back(std::move(t));
  cv.notify_all();
  return w;
}

void HierProcessGroup::Impl::loop() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> g(mu);
      cv.wait(g, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      t = std::move(queue.front());
      queue.pop_front();
    }
    const CollectiveDesc& d = t.desc;
    if (!broken.empty()) {
      t.work->finish(std::make_exception_ptr(
          Error("hier " + d.str() + " not run: the process group failed earlier and is unusable: " + broken)));
      continue;
    }
    try {
      execute(d, static_cast<char*>(t.in.data), static_cast<char*>(t.out.data));
      t.in = {};
      t.out = {};
      t.work->finish();
    } catch (const std::exception& e) {
      broken = "hier " + d.str() + " failed on rank " + std::to_string(rank) + " of " + std::to_string(size) +
               ": " + e.what();
      t.in = {};
      t.out = {};
      DDP_LOG(Error, broken);
      t.work->finish(std::make_exception_ptr(Error(broken)));
    }
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
      local->allgather(view(in, n, d.dtype), view(mine, static_cast<int64_t>(local_ranks.size()) * n, d.dtype))
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
      std::memcpy(out, scratch.data() + static_cast<size_t>(rank * chunk) * es, static_cast<size_t>(chunk) * es);
      return;
    }
    case CollectiveKind::Barrier:
      local->barrier()->wait();
      if (leaders) leaders->barrier()->wait();
      if (n_hosts > 1) local->barrier()->wait();
      return;
  }
}

std::shared_ptr<Work> HierProcessGroup::allreduce(CommBuffer buf, ReduceOp op) {
  check_buffer(buf, "allreduce buffer", "hier");
  CollectiveDesc d{CollectiveKind::Allreduce, 0, buf.numel, buf.dtype, op, -1, buf.device};
  CommBuffer same = buf;
  return impl_->enqueue(d, std::move(buf), std::move(same));
}

std::shared_ptr<Work> HierProcessGroup::broadcast(CommBuffer buf, int root) {
  check_buffer(buf, "broadcast buffer", "hier");
  check_root(root, size());
  CollectiveDesc d{CollectiveKind::Broadcast, 0, buf.numel, buf.dtype, ReduceOp::Sum, root, buf.device};
  CommBuffer same = buf;
  return impl_->enqueue(d, std::move(buf), std::move(same));
}

std::shared_ptr<Work> HierProcessGroup::allgather(CommBuffer in, CommBuffer out) {
  check_buffer(in, "allgather input", "hier");
  check_buffer(out, "allgather output", "hier");
  check_allgather(in, out, size());
  CollectiveDesc d{CollectiveKind::Allgather, 0, in.numel, in.dtype, ReduceOp::Sum, -1, in.device};
  return impl_->enqueue(d, std::move(in), std::move(out));
}

std::shared_ptr<Work> HierProcessGroup::reduce_scatter(CommBuffer in, CommBuffer out, ReduceOp op) {
  check_buffer(in, "reduce_scatter input", "hier");
  check_buffer(out, "reduce_scatter output", "hier");
  check_reduce_scatter(in, out, size());
  CollectiveDesc d{CollectiveKind::ReduceScatter, 0, in.numel, in.dtype, op, -1, in.device};
  return impl_->enqueue(d, std::move(in), std::move(out));
}

std::shared_ptr<Work> HierProcessGroup::barrier() {
  CollectiveDesc d{CollectiveKind::Barrier, 0, 0, DType::F32, ReduceOp::Sum, -1, Device::cpu()};
  return impl_->enqueue(d, CommBuffer{}, CommBuffer{});
}

}  // namespace ddp::dist
