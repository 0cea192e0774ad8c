// ft_client.h - a worker's side of per-step fault tolerance (docs/fault-tolerance.md): a thread that writes
// this worker's heartbeat every `period` and watches the coordinator's membership epochs (ft_membership.h).
// When a newer epoch appears it calls the change callback at once - the trainer aborts the group of the
// epoch it is in there, so a collective waiting on a lost rank ends now instead of at its timeout. The
// thread does nothing else, so a worker slow in its step still beats.
//
// When the store (in ddprun) cannot be reached for `deadline`, the coordinator is taken as gone: the callback
// runs with that reason and coordinator_lost() names it, so every rank stops with a clear error within the
// deadline instead of hanging.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "runtime/distributed/ft_membership.h"
#include "runtime/distributed/store.h"

namespace ddp::dist::ft {

struct ClientOptions {
  int slot = 0;
  int incarnation = 0;
  std::chrono::milliseconds period{100};     // between heartbeats (and looks at the epoch)
  std::chrono::milliseconds deadline{2000};  // the coordinator's heartbeat deadline; also how long the store
                                             // may be unreachable before the coordinator counts as gone
};

class Client {
 public:
  // `store`: a connection of this thread's own (Store::clone()). Reads the newest epoch, then starts beating.
  Client(std::shared_ptr<Store> store, ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Runs on the heartbeat thread with the reason whenever a newer epoch is known or the coordinator is lost.
  void on_change(std::function<void(const std::string&)> callback);
  // Reported in the heartbeat (the coordinator's log line names the step).
  void set_committed_step(int64_t step) { committed_step_.store(step); }

  // Training ended well here: a last heartbeat says so (the coordinator never counts a finished worker as
  // lost) and the thread stops.
  void finish();
  // Training ended here, but the thread goes on (the others may still need this rank in a recovery): every
  // heartbeat from now on says "finished" (Heartbeat::kFinished), and the coordinator lets nobody join.
  void mark_finished() { finished_.store(true); }

  Membership latest();
  // Waits until an epoch newer than `after` is known (returns it), or `timeout` passes (nullopt). Returns at
  // once, with nullopt, when the coordinator is lost.
  std::optional<Membership> wait_for_epoch_after(int64_t after, std::chrono::milliseconds timeout);
  // "" while the coordinator answers; else why it counts as gone.
  std::string coordinator_lost();
  // CPU time the heartbeat thread has used so far: what fault tolerance takes from a healthy run's cores (the
  // step itself does nothing more than plain DDP).
  double cpu_seconds() const { return static_cast<double>(cpu_ns_.load()) * 1e-9; }
  int64_t beats() const { return beats_.load(); }
  const ClientOptions& options() const { return opt_; }

 private:
  void loop();
  bool poll_epochs();  // true when a newer epoch was read

  std::shared_ptr<Store> store_;
  ClientOptions opt_;
  std::atomic<int64_t> committed_step_{0};
  std::atomic<int64_t> cpu_ns_{0}, beats_{0};
  std::atomic<bool> finished_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  Membership latest_;
  std::string lost_;
  std::function<void(const std::string&)> callback_;
  bool stop_ = false;
  int64_t beat_ = 0;
  std::thread thread_;
};

}  // namespace ddp::dist::ft
