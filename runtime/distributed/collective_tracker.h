// collective_tracker.h - the store side of a group's collectives: arrival marks, so that a timeout can name
// the ranks that never reached the collective - or that reached it with a different call (kind, count,
// dtype) - and the debug check that all ranks make the same call. Keys (under the group prefix):
// "arrived/<rank>" = "<seq>|<call>", the last sequence number that rank reached and what it called there
// (one key per rank, overwritten, so the store does not grow; the call part is empty when the backend does
// not report it); "dbg/<seq>/<rank>" = that rank's call (debug mode, deleted again).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/collective.h"
#include "runtime/distributed/store.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace ddp::dist {

// What a rank calls, comparable across ranks (no sequence number, no device: a staged CUDA buffer and a host
// buffer meet on the wire): "allreduce (1024 x float32, sum)".
std::string arrival_signature(const CollectiveDesc& d);

class CollectiveTracker {
 public:
  CollectiveTracker(std::shared_ptr<Store> store, std::string prefix, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~CollectiveTracker();
  CollectiveTracker(const CollectiveTracker&) = delete;
  CollectiveTracker& operator=(const CollectiveTracker&) = delete;

  // Notes that this rank reached collective `seq`. Never blocks on the network: a publisher thread with its
  // own store connection writes the latest value (a store round trip per collective on the communication
  // thread would add its latency to every bucket's all-reduce). Marks may lag by milliseconds, which is
  // nothing against a collective timeout. A world of one publishes nothing.
  void mark_arrived(uint64_t seq);
  // The same, with the call (arrival_signature(d)), so that a rank stuck in a different collective under the
  // same sequence number is reported as a mismatch instead of blaming the transport.
  void mark_arrived(const CollectiveDesc& d);

  struct Mark {
    int rank;
    std::optional<uint64_t> last_arrived;  // nullopt: never reached any collective of this group
    std::string call;                      // what it called at last_arrived; empty when not reported
  };
  using Straggler = Mark;
  // Every other rank's last published mark.
  std::vector<Mark> marks();
  // Ranks whose last published arrival is below `seq`.
  std::vector<Straggler> missing_ranks(uint64_t seq);

  // The error text of a collective that did not finish in time (or failed in the transport): names the
  // collective, its sequence number, count and dtype, this rank, how long after its start it failed, what
  // the cause means (a peer that closed its connection = a rank or its node's launcher went away), and then
  // either the ranks that did not arrive, or the ranks that arrived at this sequence number with a different
  // call (each rank's kind and size), or - only when every rank is at this collective with the same call -
  // the transport.
  std::string failure_message(const CollectiveDesc& d, const std::string& backend, const std::string& cause);

  // Debug mode: publishes this rank's call for d.seq, reads every other rank's and throws ddp::Error
  // describing the first mismatch (both ranks' calls), or naming the ranks that did not arrive within the
  // timeout.
  void check_same_call(const CollectiveDesc& d);

  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  std::string key(const std::string& suffix) const { return prefix_ + "/" + suffix; }

  void publish_loop();
  void note_start(uint64_t seq);

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  // the arrival publisher
  std::shared_ptr<Store> publish_store_;
  std::thread publisher_;
  std::mutex publish_mu_;
  std::condition_variable publish_cv_;
  std::optional<std::string> to_publish_;
  bool stop_ = false;
  // When this rank started its latest collective (for "failed after X s" in failure messages).
  std::atomic<uint64_t> started_seq_{~uint64_t{0}};
  std::atomic<int64_t> started_ns_{0};
};

}  // namespace ddp::dist
