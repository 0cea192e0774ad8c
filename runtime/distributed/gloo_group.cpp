// gloo_group.cpp - the Gloo process group: each collective (run in issue order on the worker thread of
// queued_process_group.h) preceded by its arrival mark in the store (and the debug-mode call check),
// executed with Gloo's TCP algorithms on host memory under a tag derived from its sequence number and its
// call (gloo_tag), and turned into a clear error (collective, sequence number, missing ranks or each rank's
// differing call) when it fails.
#include "runtime/distributed/gloo_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>

#include <dlfcn.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <typeinfo>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/distributed/collective.h"
#include "runtime/distributed/collective_tracker.h"
#include "runtime/distributed/gloo_store.h"
#include "runtime/distributed/host_reduce.h"
#include "runtime/distributed/socket_io.h"

#ifdef DDP_WITH_CUDA
#include "runtime/distributed/cuda/host_staging.h"
#endif

namespace ddp::dist {

namespace {

// Work of the Gloo group; for staged CUDA buffers, wait() also joins the caller's stream.
class GlooWork : public Work {
 public:
  using Work::Work;
  std::function<void()> join_stream;

 protected:
  void on_completed_wait() override {
    if (join_stream) join_stream();
  }
};

// Calls f.template operator()<T>() with the C++ element type of dtype.
template <class F>
void with_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32:
      return f.template operator()<float>();
    case DType::F64:
      return f.template operator()<double>();
    case DType::BF16:
      return f.template operator()<BFloat16>();
    case DType::I32:
      return f.template operator()<int32_t>();
    case DType::I64:
      return f.template operator()<int64_t>();
    case DType::U8:
      return f.template operator()<uint8_t>();
  }
}

gloo::transport::tcp::attr device_attr(const ProcessGroupOptions& options, const std::string& master_addr) {
  gloo::transport::tcp::attr attr;
  if (!options.gloo_interface.empty()) {
    attr.iface = options.gloo_interface;
  } else if (!options.gloo_hostname.empty()) {
    attr.hostname = options.gloo_hostname;
  } else if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface) {
    attr.iface = iface;
  } else {
    attr.hostname = net::local_address_towards(master_addr);
  }
  return attr;
}

// The Gloo tag of a collective. Gloo matches messages by (peer, prefix of the algorithm, tag); if two ranks
// run different collectives under one tag, a larger message lands in a smaller buffer and Gloo aborts the
// process from its transport thread ("op.preamble.length <= op.nbytes"). So the tag holds, besides the low
// 12 bits of the sequence number (c10d's per-group counter), 20 bits of a hash of the call (kind, count,
// dtype, op, root): ranks that disagree use different tags, never exchange a byte, and time out into an
// error that names both calls (collective_tracker.h). The ranks of a group are never 4096 collectives apart.
uint32_t gloo_tag(const CollectiveDesc& d) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (char c : arrival_signature(d)) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return (static_cast<uint32_t>(d.seq & 0xfffu) << 20) | (h & 0xfffffu);
}

// Ends the Gloo operations blocked on one connection, from any thread.
//
// The Gloo this builds against (Debian's 2022 snapshot, libgloo0 0.0~git20220518) has no public call for it:
// Pair::close() (and Context::closeConnections(), which calls it) closes the socket but leaves an operation
// blocked in UnboundBuffer::waitRecv asleep until its own timeout. What Gloo itself calls when an operation
// times out, tcp::Pair::signalExceptionExternal(msg), does it: under the pair's lock it fails every operation
// pending on the pair with an IoException (waking the waiter, whose collective then throws), closes the
// socket (the peer reads end-of-file: its operations fail too) and makes later operations on the pair throw
// at once. It is protected, and the package lacks a header tcp/pair.h includes (gloo/common/memory.h), so it
// is found by its exported name in libgloo and called on a pair whose dynamic type is tcp::Pair (its first
// base is transport::Pair: the same address). Where the symbol is missing (another Gloo build) this falls
// back to close(): the peers still see the connection end at once, this rank's blocked operation ends at its
// timeout.
class PairInterrupt {
 public:
  static void fail(gloo::transport::Pair& pair, const std::string& why) {
    static const Fn fn = lookup();
    if (fn && is_tcp_pair(pair)) {
      fn(&pair, why);
      return;
    }
    pair.close();
  }

 private:
  // A non-virtual member function returning a class, as the Itanium C++ ABI passes it: the return slot, then
  // `this`, then the arguments - the same registers as this free function.
  using Fn = std::exception_ptr (*)(void* self, const std::string& msg);
  static Fn lookup() {
    void* sym = ::dlsym(RTLD_DEFAULT,
                        "_ZN4gloo9transport3tcp4Pair23signalExceptionExternal"
                        "ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
    if (!sym)
      DDP_LOG(Warn,
              "gloo: tcp::Pair::signalExceptionExternal not found in this Gloo; abort() closes the "
              "connections but a blocked collective of this rank ends only at its timeout");
    return reinterpret_cast<Fn>(sym);
  }
  // Whether the pair's dynamic type is gloo::transport::tcp::Pair (by its mangled name: no header declares
  // it).
  static bool is_tcp_pair(const gloo::transport::Pair& pair) {
    const char* name = typeid(pair).name();
    if (*name == '*') ++name;
    return std::strcmp(name, "N4gloo9transport3tcp4PairE") == 0;
  }
};

}  // namespace

struct GlooProcessGroup::Impl {
  int rank = 0;
  int size = 1;
  ProcessGroupOptions options;
  std::string prefix;
  std::shared_ptr<Store> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<CollectiveTracker> tracker;
  std::atomic<bool> aborted{false};  // abort() was called: run() starts no more Gloo operations

  void execute(const CollectiveDesc& d, void* in, void* out);
  // Fails the operations pending on every connection of this rank and closes them (PairInterrupt).
  void close_connections(const std::string& why);
};

void GlooProcessGroup::Impl::close_connections(const std::string& why) {
  if (!context) return;  // world of one, or not connected
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    auto& pair = context->getPair(q);
    if (pair) PairInterrupt::fail(*pair, why);
  }
}

void GlooProcessGroup::on_failure(const std::string& why) { impl_->close_connections(why); }

void GlooProcessGroup::interrupt(const std::string& why) {
  impl_->aborted.store(true, std::memory_order_release);
  impl_->close_connections("gloo group '" + impl_->prefix + "' aborted on rank " + std::to_string(rank()) +
                           ": " + why);
}

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& options, const std::string& master_addr)
    : QueuedProcessGroup(store.get(), rank, size, options, "gloo", OnStop::RunQueued),
      impl_(std::make_unique<Impl>()) {
  // Gloo writes to its peers' sockets with writev, without MSG_NOSIGNAL: a peer that died makes the write
  // raise SIGPIPE, whose default action kills this process without a word, before the collective can fail
  // with an error naming the peer. Ignore it (as Python, and so PyTorch, does) unless the program chose a
  // handler of its own; then the write fails with EPIPE and the Work reports it.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  Impl& s = *impl_;
  s.rank = rank;
  s.size = size;
  s.options = options;
  s.store = std::move(store);
  s.prefix = group_name(options, *s.store);
  s.tracker = std::make_unique<CollectiveTracker>(s.store, s.prefix, rank, size, options.timeout);
  if (size > 1) {
    auto attr = device_attr(options, master_addr);
    try {
      s.device = gloo::transport::tcp::CreateDevice(attr);
      s.context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      s.context->setTimeout(options.timeout);
      GlooStore gloo_store(s.store, s.prefix + "/gloo/", options.timeout);
      s.context->connectFullMesh(gloo_store, s.device);
      // connectFullMesh can return on one rank while a peer is still reading its side of the handshake; a
      // rank that then destroyed its group at once (a failing program, a short test) closed the sockets under
      // that peer ("Connection closed by peer"). After a barrier every pair is whole on every rank.
      gloo::BarrierOptions opts(s.context);
      opts.setTimeout(options.timeout);
      gloo::barrier(opts);
    } catch (const std::exception& e) {
      DDP_FAIL("gloo: rank ", rank, " of ", size, " could not connect group '", s.prefix, "' (listening on ",
               attr.iface.empty() ? attr.hostname : "interface " + attr.iface, "): ", e.what(),
               ". Check that every rank started, MASTER_ADDR, and GLOO_SOCKET_IFNAME for multi-homed hosts");
    }
  }
  DDP_LOG(Info, "gloo group '", s.prefix, "': rank ", rank, " of ", size, " ready");
  start_worker(s.prefix);
}

GlooProcessGroup::~GlooProcessGroup() {
  stop_worker();
  impl_->context.reset();
  impl_->device.reset();
}

void GlooProcessGroup::prepare(Task& t) {
  if (t.in.device.is_cuda()) {
#ifdef DDP_WITH_CUDA
    // Records the issue event now; its host blocks follow the staging plan of this collective.
    t.staging = std::make_shared<cuda::HostStaging>(t.desc.kind, size(), t.in, t.out);
#else
    DDP_FAIL("gloo: ", t.desc.str(false), ": the buffer is on ", t.in.device.str(),
             " but this build has no CUDA");
#endif
  }
}

std::shared_ptr<Work> GlooProcessGroup::make_work(Task& t) {
  auto work = std::make_shared<GlooWork>(t.desc.str());
#ifdef DDP_WITH_CUDA
  if (t.staging) {
    auto staging = std::static_pointer_cast<cuda::HostStaging>(t.staging);
    work->join_stream = [staging] { staging->join_current_stream(); };
  }
#endif
  return work;
}

void GlooProcessGroup::run(Task& t) {
  Impl& s = *impl_;
  const CollectiveDesc& d = t.desc;
  // abort() closed the connections; the base turns this into the error that names its reason.
  DDP_CHECK(!s.aborted.load(std::memory_order_acquire), "gloo: ", d.str(false), " not started: aborted");
  if (s.size > 1) {
    s.tracker->mark_arrived(d);
    if (s.options.debug_collectives) s.tracker->check_same_call(d);
  }
  void* in = t.in.data;
  void* out = t.out.data;
#ifdef DDP_WITH_CUDA
  auto staging = std::static_pointer_cast<cuda::HostStaging>(t.staging);
  if (staging) {
    staging->copy_in();
    in = staging->host_in();
    out = staging->host_out();
  }
#endif
  try {
    s.execute(d, in, out);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // gloo::IoException, gloo::Exception: timeout or transport failure
    if (s.aborted.load(std::memory_order_acquire)) throw;  // the base names the abort's reason
    throw Error(s.tracker->failure_message(d, "gloo", e.what()));
  }
#ifdef DDP_WITH_CUDA
  if (staging)
    staging->copy_out();  // the staging (held by the Work) keeps the buffers until its H2D copy ends
#endif
}

void GlooProcessGroup::Impl::execute(const CollectiveDesc& d, void* in, void* out) {
  const size_t n = static_cast<size_t>(d.count);
  const size_t bytes = n * dtype_size(d.dtype);
  const uint32_t tag = gloo_tag(d);
  auto allreduce_host = [&](void* data, size_t count) {
    if (size == 1 || count == 0) return;
    gloo::AllreduceOptions opts(context);
    with_element_type(d.dtype, [&]<class T>() { opts.setOutput<T>(static_cast<T*>(data), count); });
    opts.setReduceFunction(host_reduce_fn(d.dtype, d.op));
    opts.setTag(tag);
    opts.setTimeout(d.timeout.count() > 0 ? d.timeout : options.timeout);
    gloo::allreduce(opts);
  };
  switch (d.kind) {
    case CollectiveKind::Allreduce:
      allreduce_host(out, n);
      if (d.op == ReduceOp::Avg && size > 1) divide_in_place(out, n, d.dtype, size);
      return;
    case CollectiveKind::Broadcast: {
      if (size == 1 || n == 0) return;
      gloo::BroadcastOptions opts(context);
      with_element_type(d.dtype, [&]<class T>() { opts.setOutput<T>(static_cast<T*>(out), n); });
      opts.setRoot(d.root);
      opts.setTag(tag);
      opts.setTimeout(d.timeout.count() > 0 ? d.timeout : options.timeout);
      gloo::broadcast(opts);
      return;
    }
    case CollectiveKind::Allgather: {
      if (n == 0) return;
      if (size == 1) {
        if (out != in) std::memcpy(out, in, bytes);
        return;
      }
      gloo::AllgatherOptions opts(context);
      with_element_type(d.dtype, [&]<class T>() {
        opts.setInput<T>(static_cast<T*>(in), n);
        opts.setOutput<T>(static_cast<T*>(out), n * static_cast<size_t>(size));
      });
      opts.setTag(tag);
      opts.setTimeout(d.timeout.count() > 0 ? d.timeout : options.timeout);
      gloo::allgather(opts);
      return;
    }
    case CollectiveKind::ReduceScatter: {
      // All-reduce a copy of the whole input, keep this rank's chunk.
      const size_t chunk = n / static_cast<size_t>(size);
      const size_t chunk_bytes = chunk * dtype_size(d.dtype);
      if (chunk == 0) return;
      std::vector<char> scratch(static_cast<const char*>(in), static_cast<const char*>(in) + bytes);
      allreduce_host(scratch.data(), n);
      std::memcpy(out, scratch.data() + static_cast<size_t>(rank) * chunk_bytes, chunk_bytes);
      if (d.op == ReduceOp::Avg && size > 1) divide_in_place(out, chunk, d.dtype, size);
      return;
    }
    case CollectiveKind::Barrier: {
      if (size == 1) return;
      gloo::BarrierOptions opts(context);
      opts.setTag(tag);
      opts.setTimeout(d.timeout.count() > 0 ? d.timeout : options.timeout);
      gloo::barrier(opts);
      return;
    }
  }
}

}  // namespace ddp::dist
