// shm_group_impl.h - private to the shm group's sources (shm_group.cpp: setup, running collectives, the slot
// algorithms; shm_inplace.cpp: registered buffers and the in-place all-reduce): the group's state and the
// types both use.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/collective.h"
#include "runtime/distributed/collective_tracker.h"
#include "runtime/distributed/shm/shm_group.h"
#include "runtime/distributed/shm/shm_segment.h"
#include "runtime/distributed/shm/shm_sync.h"

namespace ddp::dist {
namespace shm {

constexpr size_t kDefaultSlotBytes = size_t{1} << 20;
constexpr size_t kSmallAllreduceBytes = 32 << 10;  // below: every rank reduces the whole chunk
constexpr size_t kDefaultDirectMinBytes = kSmallAllreduceBytes + 1;  // in-place path from here

// DDP_SHM_DIRECT_MIN_BYTES (rank 0's value is used by all).
size_t direct_min_bytes_from_env();

// One registered buffer of this rank: its own segment. Owned by the memory's keepalive (it can outlive the
// group); the group keeps a weak reference to find it from a buffer address.
struct OwnBuffer {
  uint64_t index = 0;
  std::mutex mu;  // guards seg's name (unlinked from the worker, the group's destructor or the last owner)
  Segment seg;
  void unlink() {
    std::lock_guard<std::mutex> g(mu);
    seg.unlink();
  }
};

// What prepare() found for an all-reduce: the registered buffer its memory lies in (kept alive with it).
struct DirectRef {
  std::shared_ptr<OwnBuffer> own;
  uint64_t offset = 0;  // bytes from the buffer's start
};

// A wait on a peer that ended without the peer getting there.
struct PeerProblem {
  int rank;
  WaitEnd end;
};

}  // namespace shm

using namespace shm;

struct ShmProcessGroup::Impl {
  int rank = 0;
  int size = 1;
  ProcessGroupOptions options;
  std::string prefix;
  std::shared_ptr<Store> store;
  std::unique_ptr<CollectiveTracker> tracker;  // debug mode only
  WaitPolicy policy;
  std::shared_ptr<std::atomic<int>> waiters = std::make_shared<std::atomic<int>>(0);  // callers in wait()
  std::atomic<bool> aborted{false};  // set by abort() (any thread): every wait on a peer ends
  std::mutex state_mu;  // one writer of this rank's published state (worker, abort(), destructor)

  size_t slot_bytes = kDefaultSlotBytes;
  size_t direct_min_bytes = kDefaultDirectMinBytes;
  std::string run_id;
  // ---- registered buffers
  std::mutex reg_mu;  // guards next_buffer, registry (callers' threads)
  uint64_t next_buffer = 0;
  struct Registered {
    std::weak_ptr<OwnBuffer> own;
    uint64_t index = 0;  // own's, readable after own is gone
  };
  std::map<const char*, Registered> registry;                // by base address
  std::map<std::pair<int, uint64_t>, Segment> peer_buffers;  // worker thread only: (rank, index) mapped
  std::atomic<size_t> peer_buffers_mapped{0};                // peer_buffers.size() (tests)
  std::atomic<uint64_t> direct_count{0};           // in-place all-reduces
  std::atomic<uint64_t> direct_gather_scatter{0};  // in-place all-gathers and reduce-scatters
  // The in-place candidacy of the collective being stamped (worker thread).
  uint64_t stamp_direct_buffer = 0, stamp_direct_offset = 0;
  std::vector<Segment> segments;   // [rank] is ours
  std::vector<ControlBlock*> cb;   // control block of each rank
  std::vector<char*> slots;        // base of each rank's two slots
  std::vector<bool> same_process;  // thread ranks: no pid check
  uint64_t step = 0;               // worker thread only: steps run so far (the same on every rank)
  std::chrono::steady_clock::time_point deadline;

  void setup();
  // d's own timeout (ScopedCollectiveTimeout) or the group's.
  std::chrono::milliseconds timeout_of(const CollectiveDesc& d) const {
    return d.timeout.count() > 0 ? d.timeout : options.timeout;
  }
  void execute(const CollectiveDesc& d, char* in, char* out, const DirectRef* direct);
  std::string failure_message(const CollectiveDesc& d, const PeerProblem& p);
  void agree_on_outcome(const CollectiveDesc& d);                 // throws PeerProblem when it failed
  std::optional<PeerProblem> peer_problem(const CollectiveDesc& d) const;
  // shm_inplace.cpp: the registered buffer `buf` lies in (null: none, or not an in-place candidate);
  // unlinks the names of all registered buffers still alive.
  std::shared_ptr<DirectRef> find_registered(const CommBuffer& buf);
  void unlink_buffers();

  // --- step machinery
  char* slot(int r, uint64_t k) const { return slots[r] + (k % 2) * slot_bytes; }
  // Each step has four marks: 1 written (or stamped), 2 written after a fallback, 3 reduced, 4 done.
  uint32_t base() const { return static_cast<uint32_t>(step * 4); }
  void publish(uint32_t v) { publish_progress(*cb[rank], v); }
  // Publishes this rank's state (and the failure text) unless it left the Alive state already: the text is
  // written once, before peers can see the state.
  void publish_own_state(PeerState st, const std::string& why = "");
  void wait_rank(int q, uint32_t target) {
    WaitEnd e = wait_progress(*cb[q], target, deadline, policy, same_process[q], waiters.get(), &aborted);
    if (e != WaitEnd::Reached) throw PeerProblem{q, e};
  }
  void wait_all(uint32_t target) {
    for (int q = 0; q < size; ++q)
      if (q != rank) wait_rank(q, target);
  }
  // Start of a step: our slot of this step's parity is free once every peer finished the step before last.
  // The first step of a collective also stamps the call, only now: a peer still checking our stamp of the
  // same parity (two collectives back) has finished that step.
  void begin_step(const CollectiveDesc& d, uint64_t s) {
    if (step >= 2) wait_all(base() - 4);
    if (s == 0) stamp_call(d);
  }
  void end_step() {
    publish(base() + 4);
    ++step;
  }
  void stamp_call(const CollectiveDesc& d);
  void check_peer_call(int q, const CollectiveDesc& d);

  void allreduce(const CollectiveDesc& d, char* data, const DirectRef* direct);
  // Every rank stamped a registered buffer of the same index (same_offset: at the same offset too).
  bool all_agree_on_direct(const CollectiveDesc& d, bool same_offset = true) const;
  // The first step of an all-gather or reduce-scatter (shm_group.cpp): true when every rank takes the
  // in-place path; else the slot holds this rank's data and every peer's is readable.
  bool first_step_goes_direct(const CollectiveDesc& d, const DirectRef* direct, bool same_offset,
                              const std::function<void()>& fill_slot);
  void direct_allgather(const CollectiveDesc& d, const DirectRef& ref, const char* in, char* out);
  void direct_reduce_scatter(const CollectiveDesc& d, const DirectRef& ref, char* out);
  void direct_allreduce(const CollectiveDesc& d, const DirectRef& ref);
  char* peer_buffer(int q, uint64_t index, size_t end_bytes);
  void unmap_freed_peer_buffers();
  void broadcast(const CollectiveDesc& d, char* data);
  void allgather(const CollectiveDesc& d, const char* in, char* out, const DirectRef* direct);
  void reduce_scatter(const CollectiveDesc& d, const char* in, char* out, const DirectRef* direct);
  void barrier(const CollectiveDesc& d);
};

}  // namespace ddp::dist
