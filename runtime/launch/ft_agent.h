// ft_agent.h - ddprun's part of per-step fault tolerance (--fault-tolerant, docs/fault-tolerance.md). On node 0
// it hosts the store every worker uses (DDP_STORE=agent: the store must outlive any rank, so no rank hosts
// it) and runs the membership coordinator (runtime/distributed/ft_coordinator.h) in ddprun's own poll loop;
// on the other nodes it only connects to that store, reports its workers' ends there (ft/exit/...) and
// follows the published epochs. On every node it tells the supervisor which of its workers the newest epoch
// removed (to kill, if one still runs: a rank thrown out for a silent heartbeat must not come back) and
// which it may replace.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/ft_coordinator.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_server.h"
#include "runtime/launch/launch_config.h"

namespace ddp::launch {

class FtAgent {
 public:
  using Clock = std::chrono::steady_clock;
  // Node 0: starts the store server on MASTER_ADDR:MASTER_PORT and publishes epoch 0. Other nodes: connects.
  explicit FtAgent(const LaunchConfig& c);
  ~FtAgent();

  // A worker of this node ended; `failed`: non-zero exit or a signal; `what`: "SIGKILL (signal 9)".
  void worker_ended(int slot, int incarnation, bool failed, const std::string& what);

  struct Tick {
    std::optional<dist::ft::Membership> changed;  // a newer epoch was published (node 0) or read (others)
    std::vector<dist::ft::Member> removed;        // members of this node that epoch removed
  };
  Tick tick();
  // The newest membership known here.
  const dist::ft::Membership& current() const { return current_; }
  bool failed() const { return current_.failed; }
  // How often ddprun's loop should call tick().
  static constexpr int kTickMs = 50;

  // Counts for the summary.
  int changes() const { return changes_; }

 private:
  const LaunchConfig& c_;
  std::unique_ptr<dist::StoreServer> server_;
  std::shared_ptr<dist::Store> store_;
  std::unique_ptr<dist::ft::Coordinator> coordinator_;
  dist::ft::Membership current_;
  int changes_ = 0;
  bool unreachable_ = false;  // not node 0: the store stopped answering; ddprun no longer asks it
};

}  // namespace ddp::launch
