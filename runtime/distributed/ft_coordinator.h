// ft_coordinator.h - the membership coordinator of per-step fault tolerance (docs/fault-tolerance.md). It runs
// in ddprun (the agent, beside the store ddprun hosts with --fault-tolerant), not in a worker: the agent
// outlives any worker, sees its own workers end the moment they do (SIGCHLD), and has no step to compute, so
// its ticks are never late. It decides which workers make up the job, epoch by epoch, and publishes each
// decision in the store (ft_membership.h); it never takes part in a step. A member is lost when ddprun saw its
// process end with a failure, when another node's ddprun reported that (ft/exit/...), or when its heartbeat
// has not moved for `deadline` (a crashed host, a cut link, a process that stopped). A slot whose new
// incarnation (a replacement) heartbeats joins. Several changes seen in one tick make one epoch. Fewer
// members than `min_ranks` publishes a failed epoch: every worker stops with an error naming the lost ranks.
//
// Heartbeats are written by a thread of each worker that does nothing else (ft_client.h), so a rank that is
// slow in its step still beats: slowness is never mistaken for death; a hung collective is the collective
// timeout's business.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/ft_membership.h"
#include "runtime/distributed/store.h"

namespace ddp::dist::ft {

struct CoordinatorOptions {
  int slots = 1;                                      // the launch's world size
  std::chrono::milliseconds deadline{2000};           // a member whose heartbeat stood still this long is lost
  std::chrono::milliseconds first_beat_timeout{120000};  // a process's first heartbeat (start-up, library load)
  int min_ranks = 1;                                  // fewer members: the job fails
};

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;
  // `store`: a client of the store the workers use (ddprun's own connection to the server it hosts).
  Coordinator(std::shared_ptr<Store> store, CoordinatorOptions options);

  // Publishes epoch 0: every slot, incarnation 0. Call before the workers start.
  void start(Clock::time_point now);
  // ddprun saw the process of (slot, incarnation) end: `failed` (a non-zero exit or a signal) makes it lost at
  // the next tick; `what` says how ("SIGKILL (signal 9)", "exit code 3").
  void worker_ended(int slot, int incarnation, bool failed, const std::string& what);
  // Reads the heartbeats and exit reports; publishes and returns a new membership when it changed.
  std::optional<Membership> tick(Clock::time_point now);

  const Membership& current() const { return current_; }
  // A failed epoch was published: the job is over.
  bool failed() const { return current_.failed; }
  // The members the last published epoch removed (ddprun kills any of its own still running: a rank thrown out
  // for a silent heartbeat must not come back as a zombie).
  const std::vector<Member>& removed_last() const { return removed_last_; }

 private:
  struct Slot {
    int incarnation = -1;      // of the newest heartbeat seen
    int64_t beat = INT64_MIN;  // none read yet (not Heartbeat::kFinished)
    Clock::time_point moved;   // when the heartbeat last changed (or the incarnation was expected from)
    bool seen = false;         // a heartbeat of `incarnation` was read
    int ended_incarnation = -1;  // the newest incarnation that ended with a failure
    int lost_incarnation = -1;   // the newest incarnation removed from the job: it never comes back
    std::string ended_what;
  };
  void publish(Membership m);

  std::shared_ptr<Store> store_;
  CoordinatorOptions opt_;
  std::vector<Slot> slots_;
  Membership current_;
  std::vector<Member> removed_last_;
  bool finished_published_ = false;
  int64_t newest_step_ = 0;
  Clock::time_point started_;
};

}  // namespace ddp::dist::ft
