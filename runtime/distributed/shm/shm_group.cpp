// shm_group.cpp - the shared-memory group: segment setup through the store, running a collective (on the
// worker thread of queued_process_group.h) with its error text, and the chunked lock-step algorithms of each
// collective over the peers' slots (the in-place all-reduce of registered buffers: shm_inplace.cpp).
#include "runtime/distributed/shm/shm_group.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/core/env_number.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/distributed/shm/shm_group_impl.h"
#include "runtime/distributed/shm/shm_reduce.h"
#include "runtime/distributed/shm/shm_verdict.h"

namespace ddp::dist {

using namespace shm;

namespace {

size_t slot_bytes_from_env() {
  return static_cast<size_t>(integer_from_env("DDP_SHM_CHUNK_BYTES", 4096, 1ll << 30,
                                              "a multiple of 64 between 4096 and 1073741824 bytes", 64)
                                 .value_or(kDefaultSlotBytes));
}

// Counts a caller that waits for the collectives (in wait(), or running one itself with run_on_caller).
struct CallerWaits {
  explicit CallerWaits(std::atomic<int>& n) : n_(n) { n_.fetch_add(1, std::memory_order_relaxed); }
  ~CallerWaits() { n_.fetch_sub(1, std::memory_order_relaxed); }
  CallerWaits(const CallerWaits&) = delete;
  CallerWaits& operator=(const CallerWaits&) = delete;
  std::atomic<int>& n_;
};

// While a caller blocks in wait(), the worker's waits on peers spin longer: nothing else needs this rank's
// core then, and a futex wake-up is slow. The counter outlives the group (a Work may).
class ShmWork : public Work {
 public:
  ShmWork(std::string description, std::shared_ptr<std::atomic<int>> waiters)
      : Work(std::move(description)), waiters_(std::move(waiters)) {}
  void wait() override {
    Waiting w(*waiters_);
    Work::wait();
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    Waiting w(*waiters_);
    return Work::wait_for(timeout);
  }

 private:
  using Waiting = CallerWaits;
  std::shared_ptr<std::atomic<int>> waiters_;
};

uint64_t pack_shape(const CollectiveDesc& d) {
  return static_cast<uint64_t>(d.kind) | static_cast<uint64_t>(d.dtype) << 8 |
         static_cast<uint64_t>(d.op) << 16 | static_cast<uint64_t>(d.root + 1) << 24;
}
CollectiveDesc unpack_shape(uint64_t shape, int64_t count, uint64_t seq) {
  CollectiveDesc d;
  d.kind = static_cast<CollectiveKind>(shape & 0xff);
  d.dtype = static_cast<DType>((shape >> 8) & 0xff);
  d.op = static_cast<ReduceOp>((shape >> 16) & 0xff);
  d.root = static_cast<int>((shape >> 24) & 0xffff) - 1;
  d.count = count;
  d.seq = seq;
  return d;
}

}  // namespace

// ---------------------------------------------------------------------------------------------- setup

ShmProcessGroup::ShmProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                 const ProcessGroupOptions& options)
    : QueuedProcessGroup(store.get(), rank, size, options, "shm", OnStop::FailQueued),
      impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.rank = rank;
  s.size = size;
  s.options = options;
  s.store = std::move(store);
  s.prefix = group_name(options, *s.store);
  s.policy = wait_policy_from_env();
  if (options.debug_collectives && size > 1)
    s.tracker = std::make_unique<CollectiveTracker>(s.store, s.prefix, rank, size, options.timeout);
  s.setup();
  DDP_LOG(Info, "shm group '", s.prefix, "': rank ", rank, " of ", size, " ready (", s.slot_bytes,
          "-byte slots)");
  start_worker(s.prefix);
}

void ShmProcessGroup::Impl::setup() {
  const auto key = [&](const std::string& k) { return prefix + "/shm/" + k; };
  const auto t = options.timeout;
  for (const auto& n : remove_stale_segments())
    DDP_LOG(Info, "shm: removed /dev/shm/", n, ", left by a process that no longer exists");
  // Rank 0 picks the run id (part of every segment name) and the slot size; all ranks use its choice.
  std::string config;
  if (rank == 0) {
    config = random_run_id() + " " + std::to_string(slot_bytes_from_env()) + " " +
             std::to_string(direct_min_bytes_from_env());
    store->set(key("config"), config);
  } else {
    config = store->get(key("config"), t);
  }
  const size_t space = config.find(' ');
  DDP_CHECK(space != std::string::npos, "shm: malformed group config '", config, "' in the store");
  const size_t space2 = config.find(' ', space + 1);
  DDP_CHECK(space2 != std::string::npos, "shm: malformed group config '", config, "' in the store");
  run_id = config.substr(0, space);
  slot_bytes = std::stoull(config.substr(space + 1, space2 - space - 1));
  direct_min_bytes = std::stoull(config.substr(space2 + 1));

  DDP_CHECK(size <= kMaxVerdictWorld, "shm: a group of ", size, " ranks is larger than the ", kMaxVerdictWorld,
            " the shm backend supports on one host; use --backend gloo");
  segments.resize(size);
  cb.resize(size);
  slots.resize(size);
  same_process.resize(size);
  Segment& own = segments[rank];
  own = Segment::create(segment_name(run_id, std::to_string(rank)), kControlBytes + 2 * slot_bytes);
  auto* mine = new (own.data()) ControlBlock();
  mine->pid = static_cast<int32_t>(::getpid());
  mine->slot_bytes = static_cast<uint32_t>(slot_bytes);
  mine->progress.store(0);
  mine->sleepers.store(0);
  mine->arrived.store(0);
  mine->state.store(static_cast<uint32_t>(PeerState::Alive));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  mine->magic = kMagic;
  store->set(key("seg/" + std::to_string(rank)), own.name());

  for (int q = 0; q < size; ++q) {
    if (q != rank) {
      const std::string name = store->get(key("seg/" + std::to_string(q)), t);
      segments[q] = Segment::open(name);
      DDP_CHECK(segments[q].size() == kControlBytes + 2 * slot_bytes, "shm: segment ", name, " of rank ", q,
                " has ", segments[q].size(), " bytes, expected ", kControlBytes + 2 * slot_bytes);
    }
    cb[q] = static_cast<ControlBlock*>(segments[q].data());
    DDP_CHECK(cb[q]->magic == kMagic, "shm: segment ", segments[q].name(), " of rank ", q,
              " is not a ddp.cpp segment (bad magic)");
    slots[q] = static_cast<char*>(segments[q].data()) + kControlBytes;
    same_process[q] = cb[q]->pid == static_cast<int32_t>(::getpid());
  }
  // Once every rank mapped every segment the names can go: nothing is left in /dev/shm even after a crash.
  store->set(key("mapped/" + std::to_string(rank)), "1");
  std::vector<std::string> mapped;
  for (int q = 0; q < size; ++q) mapped.push_back(key("mapped/" + std::to_string(q)));
  try {
    store->wait(mapped, t);
  } catch (const Error& e) {
    DDP_FAIL(
        "shm: rank ", rank, " of ", size, " could not set up group '", prefix,
        "': not every rank mapped the shared-memory segments in time (", e.what(),
        "). Check that every rank started and that all ranks are on this host (else use --backend gloo)");
  }
  own.unlink();
}

ShmProcessGroup::~ShmProcessGroup() {
  Impl& s = *impl_;
  stop_worker();
  s.unlink_buffers();  // registered buffers that outlive the group stay usable memory; their names go now
  s.publish_own_state(PeerState::Closed);  // unless it failed or aborted: peers keep that reason
}

void ShmProcessGroup::Impl::publish_own_state(PeerState st, const std::string& why) {
  std::lock_guard<std::mutex> g(state_mu);
  if (static_cast<PeerState>(cb[rank]->state.load()) != PeerState::Alive) return;
  publish_state(*cb[rank], st, why);
}

void ShmProcessGroup::interrupt(const std::string& why) {
  Impl& s = *impl_;
  s.aborted.store(true, std::memory_order_release);
  s.publish_own_state(PeerState::Failed, "aborted the group: " + why);
  // The worker may sleep on a peer's progress word or on a verdict word: wake it now rather than at the end
  // of its slice (other sleepers on those words wake for nothing and sleep again).
  for (int q = 0; q < s.size; ++q)
    if (q != s.rank) futex_wake_shared(&s.cb[q]->progress);
  if (s.size > 1) {
    futex_wake_shared(&s.cb[0]->verdict[0]);
    futex_wake_shared(&s.cb[0]->verdict[1]);
  }
}

// ----------------------------------------------------------------------------------- running a collective

void ShmProcessGroup::prepare(Task& t) {
  DDP_CHECK(t.in.device.is_cpu() && t.out.device.is_cpu(), "shm: ", t.desc.str(false), ": the buffer is on ",
            t.in.device.is_cpu() ? t.out.device.str() : t.in.device.str(),
            " but the shm backend moves CPU memory only; use nccl for CUDA buffers (or gloo, which stages "
            "them through host memory)");
  // The peers read `in` in place when it lies in a registered buffer (all-reduce: the buffer; reduce-scatter:
  // the whole input; all-gather: this rank's chunk, often inside the registered output).
  const CollectiveKind k = t.desc.kind;
  if (k == CollectiveKind::Allreduce || k == CollectiveKind::ReduceScatter || k == CollectiveKind::Allgather)
    t.staging = impl_->find_registered(t.in);
}

std::shared_ptr<Work> ShmProcessGroup::make_work(Task& t) {
  return std::make_shared<ShmWork>(t.desc.str(), impl_->waiters);
}

void ShmProcessGroup::run(Task& t) {
  Impl& s = *impl_;
  const CollectiveDesc& d = t.desc;
  // Run on the issuing thread, the caller waits for it: the long spin applies, as for a caller in wait().
  std::optional<CallerWaits> caller;
  if (runs_on_caller()) caller.emplace(*s.waiters);
  if (s.tracker) s.tracker->check_same_call(d);
  s.deadline = std::chrono::steady_clock::now() + s.timeout_of(d);
  try {
    s.execute(d, static_cast<char*>(t.in.data), static_cast<char*>(t.out.data),
              static_cast<const DirectRef*>(t.staging.get()));
    s.agree_on_outcome(d);
  } catch (const PeerProblem& p) {
    if (s.size > 1) vote_failed(*s.cb[0], d.seq, s.size, s.rank);  // this rank has not voted: it decides
    throw Error(s.failure_message(d, p));
  } catch (const Error&) {
    if (s.size > 1) vote_failed(*s.cb[0], d.seq, s.size, s.rank);  // a mismatch found in the call stamps
    throw;
  }
}

// Every rank reports the same outcome (shm_verdict.h): this rank votes that it completed and waits until all
// did, or until some rank failed the collective - then this rank fails too, with that rank's reason. A peer
// that dies, leaves or fails meanwhile, or the deadline, makes this rank vote failed; if every rank had
// voted completed by then, the collective completed after all.
void ShmProcessGroup::Impl::agree_on_outcome(const CollectiveDesc& d) {
  if (size == 1) return;
  ControlBlock& rank0 = *cb[0];
  VerdictState v = vote_completed(rank0, d.seq, size);
  while (v.verdict == Verdict::Pending) {
    const bool caller_waits = waiters->load(std::memory_order_relaxed) > 0;
    if (!aborted.load(std::memory_order_acquire))
      wait_verdict_change(rank0, d.seq, v.word, caller_waits ? policy.waited_spin : policy.spin,
                          policy.slice);
    v = read_verdict(rank0, d.seq, size);
    if (v.verdict != Verdict::Pending) break;
    std::optional<PeerProblem> problem = peer_problem(d);
    if (!problem) continue;
    v = vote_failed(rank0, d.seq, size, rank);
    if (v.verdict == Verdict::Failed && v.failed_by == rank) throw *problem;
  }
  if (v.verdict == Verdict::Completed) return;
  // Failed by a peer: its failure state (published right after its vote) carries the reason.
  const int q = v.failed_by;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (static_cast<PeerState>(cb[q]->state.load()) == PeerState::Alive &&
         std::chrono::steady_clock::now() < until && !aborted.load(std::memory_order_acquire))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  throw PeerProblem{q, WaitEnd::PeerFailed};
}

// Why this rank should give up waiting for the others' votes on d, if it should: a peer failed, left or died,
// or the deadline passed (blamed on a peer that has not finished its part; its progress shows it).
std::optional<PeerProblem> ShmProcessGroup::Impl::peer_problem(const CollectiveDesc& d) const {
  (void)d;
  if (aborted.load(std::memory_order_acquire)) return PeerProblem{rank, WaitEnd::Aborted};
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    switch (static_cast<PeerState>(cb[q]->state.load(std::memory_order_acquire))) {
      case PeerState::Failed:
        return PeerProblem{q, WaitEnd::PeerFailed};
      case PeerState::Closed:
        return PeerProblem{q, WaitEnd::PeerClosed};
      case PeerState::Alive:
        break;
    }
    if (!same_process[q] && !pid_alive(cb[q]->pid)) return PeerProblem{q, WaitEnd::PeerDied};
  }
  if (std::chrono::steady_clock::now() < deadline) return std::nullopt;
  const uint32_t finished = base();  // every step of this collective done: the mark its last end_step left
  for (int q = 0; q < size; ++q)
    if (q != rank && !reached(cb[q]->progress.load(std::memory_order_acquire), finished))
      return PeerProblem{q, WaitEnd::Deadline};
  return PeerProblem{rank == 0 ? 1 : 0, WaitEnd::Deadline};
}

void ShmProcessGroup::on_failure(const std::string& why) { impl_->publish_own_state(PeerState::Failed, why); }

std::string ShmProcessGroup::Impl::failure_message(const CollectiveDesc& d, const PeerProblem& p) {
  std::string msg = "shm " + d.str() + " failed on rank " + std::to_string(rank) + " of " +
                    std::to_string(size) + " (timeout " + std::to_string(timeout_of(d).count()) + " ms): ";
  std::string missing;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    const uint64_t arrived = cb[q]->arrived.load();
    if (arrived > d.seq) continue;
    if (!missing.empty()) missing += ", ";
    // Appended piece by piece: `"#" + std::to_string(...)` here makes GCC 12 warn falsely (-Wrestrict).
    missing += std::to_string(q);
    missing += " (last reached: ";
    missing += arrived == 0 ? std::string("none") : std::string("#").append(std::to_string(arrived - 1));
    missing += ")";
  }
  if (missing.empty()) {
    msg += "all ranks arrived at this collective";
  } else {
    msg +=
        "rank(s) " + missing +
        " did not arrive at this collective. A rank skipped it, crashed or is stuck: every rank must issue "
        "the same collectives in the same order (DDP_DEBUG_COLLECTIVES=1 checks this)";
  }
  std::string cause;
  const std::string q = "rank " + std::to_string(p.rank);
  switch (p.end) {
    case WaitEnd::Deadline:
      cause = q + " did not take its part within the timeout";
      break;
    case WaitEnd::PeerDied:
      cause = q + " (pid " + std::to_string(cb[p.rank]->pid) + ") died";
      break;
    case WaitEnd::PeerClosed:
      cause = q + " destroyed its process group (or exited) without running this collective";
      break;
    case WaitEnd::PeerFailed:
      cause = q + " failed: " + std::string(cb[p.rank]->failure);
      break;
    case WaitEnd::Aborted:
      cause = "this rank aborted the process group";
      break;
    case WaitEnd::Reached:
      break;
  }
  return msg + ". Cause reported by shm: " + cause;
}

// ------------------------------------------------------------------------- call stamps (always-on check)

void ShmProcessGroup::Impl::stamp_call(const CollectiveDesc& d) {
  CallStamp& st = cb[rank]->call[d.seq % 2];
  st.shape.store(pack_shape(d), std::memory_order_relaxed);
  st.count.store(d.count, std::memory_order_relaxed);
  st.direct_buffer.store(stamp_direct_buffer, std::memory_order_relaxed);
  st.direct_offset.store(stamp_direct_offset, std::memory_order_relaxed);
  st.seq.store(d.seq, std::memory_order_relaxed);
  // Published to peers by the release of the next progress store.
}

// Called once peer q published phase 1 of this collective's first step. A peer is at most one step (so one
// collective) ahead, so its stamp of our sequence number's parity is stable here.
void ShmProcessGroup::Impl::check_peer_call(int q, const CollectiveDesc& d) {
  const CallStamp& st = cb[q]->call[d.seq % 2];
  const uint64_t seq = st.seq.load(std::memory_order_relaxed);
  const uint64_t shape = st.shape.load(std::memory_order_relaxed);
  const int64_t count = st.count.load(std::memory_order_relaxed);
  if (seq == d.seq && shape == pack_shape(d) && count == d.count) return;
  const std::string mine = d.str(false);
  const std::string theirs = seq == d.seq ? unpack_shape(shape, count, seq).str(false)
                                          : "collective #" + std::to_string(seq) +
                                                " (it ran a different number of collectives or sizes)";
  DDP_FAIL(
      "collective mismatch at sequence number ", d.seq, ": rank ", rank, " calls ", mine, " but rank ", q,
      " calls ", theirs,
      ". Every rank must issue the same collectives, with the same counts and dtypes, in the same order. ",
      kMismatchHint);
}

// ---------------------------------------------------------------------------------------- algorithms

void ShmProcessGroup::Impl::execute(const CollectiveDesc& d, char* in, char* out, const DirectRef* direct) {
  const size_t es = dtype_size(d.dtype);
  if (size == 1) {
    // Nothing to exchange: only the out-of-place collectives copy.
    if (d.kind == CollectiveKind::Allgather && in != out) std::memmove(out, in, d.count * es);
    if (d.kind == CollectiveKind::ReduceScatter && in != out) std::memmove(out, in, d.count * es);
    return;
  }
  cb[rank]->arrived.store(d.seq + 1, std::memory_order_release);
  stamp_direct_buffer = stamp_direct_offset = 0;
  switch (d.kind) {
    case CollectiveKind::Allreduce:
      return allreduce(d, out, direct);
    case CollectiveKind::Broadcast:
      return broadcast(d, out);
    case CollectiveKind::Allgather:
      return allgather(d, in, out, direct);
    case CollectiveKind::ReduceScatter:
      return reduce_scatter(d, in, out, direct);
    case CollectiveKind::Barrier:
      return barrier(d);
  }
}

namespace {
// Number of chunk-steps for n elements of `per_step` each: at least one, so every collective (even an empty
// one) makes the ranks meet and compare their calls.
uint64_t steps_for(int64_t n, int64_t per_step) {
  return n <= 0 ? 1 : static_cast<uint64_t>((n + per_step - 1) / per_step);
}
}  // namespace

void ShmProcessGroup::Impl::allreduce(const CollectiveDesc& d, char* data, const DirectRef* direct) {
  const size_t es = dtype_size(d.dtype);
  const int64_t per_step = static_cast<int64_t>(slot_bytes / es);
  const uint64_t steps = steps_for(d.count, per_step);
  std::vector<const void*> inputs(size);
  // A registered buffer (prepare() found it): the first step only stamps; the copy into the slot waits until
  // the stamps show whether every rank agrees on the in-place path.
  if (direct) {
    stamp_direct_buffer = direct->own->index + 1;
    stamp_direct_offset = direct->offset;
  }
  for (uint64_t s = 0; s < steps; ++s) {
    const int64_t off = static_cast<int64_t>(s) * per_step;
    const size_t len =
        static_cast<size_t>(std::min<int64_t>(per_step, d.count - off < 0 ? 0 : d.count - off));
    char* chunk = data + off * es;
    begin_step(d, s);
    const uint32_t b = base();
    const bool small = len * es <= kSmallAllreduceBytes;
    const size_t align = 64 / es;
    // Parts of ceil(len / size) rounded up to 64 bytes: they cover the chunk for every length (a floor here
    // left the last len % size elements to no rank when len / size was already aligned).
    const size_t share = (len + static_cast<size_t>(size) - 1) / static_cast<size_t>(size);
    const size_t part = (share + align - 1) / align * align;
    auto lo = [&](int q) { return std::min(len, part * static_cast<size_t>(q)); };
    auto hi = [&](int q) { return std::min(len, part * static_cast<size_t>(q + 1)); };
    // Into our slot goes what the peers read: all of it (small), or the parts the peers reduce.
    auto fill_slot = [&] {
      if (small) {
        std::memcpy(slot(rank, step), chunk, len * es);
      } else {
        for (int q = 0; q < size; ++q)
          if (q != rank) std::memcpy(slot(rank, step) + lo(q) * es, chunk + lo(q) * es, (hi(q) - lo(q)) * es);
      }
    };
    const bool stamped_only = s == 0 && direct;
    if (!stamped_only) fill_slot();
    publish(b + 1);
    bool any_candidate = stamped_only;
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      wait_rank(q, b + 1);
      if (s == 0) {
        check_peer_call(q, d);
        any_candidate |= cb[q]->call[d.seq % 2].direct_buffer.load(std::memory_order_relaxed) != 0;
      }
    }
    if (s == 0 && any_candidate) {
      if (all_agree_on_direct(d)) return direct_allreduce(d, *direct);
      // Fallback: some rank stamped only, so everyone waits for the second "written" mark.
      if (stamped_only) fill_slot();
      publish(b + 2);
      wait_all(b + 2);
    }
    if (small) {
      for (int q = 0; q < size; ++q) inputs[q] = slot(q, step);
      reduce_inputs(chunk, inputs.data(), size, len, d.dtype, d.op, size);
      end_step();
      continue;
    }
    // Reduce-scatter: this rank reduces part `rank` (aligned to 64 bytes) of every rank's chunk, in rank
    // order, reading its own part straight from the caller's buffer, and writes the result to its slot (for
    // the peers) and to the caller's buffer.
    const size_t my_lo = lo(rank), my_n = hi(rank) - lo(rank);
    for (int q = 0; q < size; ++q)
      inputs[q] = q == rank ? static_cast<const void*>(chunk + my_lo * es) : slot(q, step) + my_lo * es;
    reduce_inputs(slot(rank, step) + my_lo * es, inputs.data(), size, my_n, d.dtype, d.op, size,
                  chunk + my_lo * es);
    publish(b + 3);
    // All-gather of the reduced parts.
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      wait_rank(q, b + 3);
      std::memcpy(chunk + lo(q) * es, slot(q, step) + lo(q) * es, (hi(q) - lo(q)) * es);
    }
    end_step();
  }
}

void ShmProcessGroup::Impl::broadcast(const CollectiveDesc& d, char* data) {
  const size_t es = dtype_size(d.dtype);
  const int64_t per_step = static_cast<int64_t>(slot_bytes / es);
  const uint64_t steps = steps_for(d.count, per_step);
  for (uint64_t s = 0; s < steps; ++s) {
    const int64_t off = static_cast<int64_t>(s) * per_step;
    const size_t len = static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(per_step, d.count - off)));
    begin_step(d, s);
    if (rank == d.root) {
      std::memcpy(slot(rank, step), data + off * es, len * es);
    } else {
      wait_rank(d.root, base() + 1);
      if (s == 0) check_peer_call(d.root, d);
      std::memcpy(data + off * es, slot(d.root, step), len * es);
    }
    end_step();  // the root's "written" and everyone's "done reading" are the same mark here
  }
}

// All-gather and reduce-scatter: with a registered input (prepare() found it) the first step only stamps, as
// the all-reduce's does; when every rank stamped one (same_offset: the same offset too) the peers read each
// other's input in place (shm_inplace.cpp), else - marks 1 and 2 - the slot algorithm below runs.
bool ShmProcessGroup::Impl::first_step_goes_direct(const CollectiveDesc& d, const DirectRef* direct,
                                                   bool same_offset, const std::function<void()>& fill_slot) {
  const uint32_t b = base();
  if (!direct) fill_slot();
  publish(b + 1);
  bool any_candidate = direct != nullptr;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    wait_rank(q, b + 1);
    check_peer_call(q, d);
    any_candidate |= cb[q]->call[d.seq % 2].direct_buffer.load(std::memory_order_relaxed) != 0;
  }
  if (!any_candidate) return false;
  if (all_agree_on_direct(d, same_offset)) return true;
  if (direct) fill_slot();
  publish(b + 2);
  wait_all(b + 2);
  return false;
}

void ShmProcessGroup::Impl::allgather(const CollectiveDesc& d, const char* in, char* out,
                                      const DirectRef* direct) {
  const size_t es = dtype_size(d.dtype);
  const int64_t per_step = static_cast<int64_t>(slot_bytes / es);
  const uint64_t steps = steps_for(d.count, per_step);
  if (direct) {
    stamp_direct_buffer = direct->own->index + 1;
    stamp_direct_offset = direct->offset;
  }
  for (uint64_t s = 0; s < steps; ++s) {
    const int64_t off = static_cast<int64_t>(s) * per_step;
    const size_t len = static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(per_step, d.count - off)));
    begin_step(d, s);
    const uint32_t b = base();
    auto fill_slot = [&] { std::memcpy(slot(rank, step), in + off * es, len * es); };
    if (s == 0) {
      // Each rank's input may sit at its own offset (in place it is chunk `rank` of the output).
      if (first_step_goes_direct(d, direct, /*same_offset=*/false, fill_slot))
        return direct_allgather(d, *direct, in, out);
    } else {
      fill_slot();
      publish(b + 1);
    }
    std::memmove(out + (static_cast<int64_t>(rank) * d.count + off) * es, in + off * es, len * es);
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      if (s > 0) wait_rank(q, b + 1);
      std::memcpy(out + (static_cast<int64_t>(q) * d.count + off) * es, slot(q, step), len * es);
    }
    end_step();
  }
}

void ShmProcessGroup::Impl::reduce_scatter(const CollectiveDesc& d, const char* in, char* out,
                                           const DirectRef* direct) {
  const size_t es = dtype_size(d.dtype);
  const int64_t chunk = d.count / size;  // elements each rank ends with
  const int64_t per_step = std::max<int64_t>(1, static_cast<int64_t>(slot_bytes / es) / size);
  const uint64_t steps = steps_for(chunk, per_step);
  std::vector<const void*> inputs(size);
  if (direct) {
    stamp_direct_buffer = direct->own->index + 1;
    stamp_direct_offset = direct->offset;
  }
  for (uint64_t s = 0; s < steps; ++s) {
    const int64_t off = static_cast<int64_t>(s) * per_step;
    const size_t len = static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(per_step, chunk - off)));
    begin_step(d, s);
    const uint32_t b = base();
    // Our slot holds block q's piece at q * len.
    auto fill_slot = [&] {
      for (int q = 0; q < size; ++q)
        std::memcpy(slot(rank, step) + q * len * es, in + (q * chunk + off) * es, len * es);
    };
    if (s == 0) {
      if (first_step_goes_direct(d, direct, /*same_offset=*/true, fill_slot))
        return direct_reduce_scatter(d, *direct, out);
    } else {
      fill_slot();
      publish(b + 1);
      wait_all(b + 1);
    }
    for (int q = 0; q < size; ++q) inputs[q] = slot(q, step) + rank * len * es;
    reduce_inputs(out + off * es, inputs.data(), size, len, d.dtype, d.op, size);
    end_step();
  }
}

void ShmProcessGroup::Impl::barrier(const CollectiveDesc& d) {
  begin_step(d, 0);
  publish(base() + 1);
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    wait_rank(q, base() + 1);
    check_peer_call(q, d);
  }
  end_step();
}

}  // namespace ddp::dist
