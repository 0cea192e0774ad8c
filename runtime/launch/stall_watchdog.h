// stall_watchdog.h - ddprun's stall watchdog: one progress page per local worker (flight_progress.h), and the
// rule that calls a job stalled: some worker has had a collective pending for longer than the limit with no
// collective of its own issued, started or ended meanwhile. A rank that computes (nothing pending) never
// counts, however long it computes; a rank SIGSTOPped mid-step is seen through the peers that wait for it.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/flight_progress.h"

namespace ddp::launch {

struct Stall {
  int local_rank = 0;
  uint64_t pending = 0;   // collectives that worker had outstanding
  double waited_s = 0;    // since its last transition
};

class StallWatchdog {
 public:
  // One page per local worker in `dir` (progress.rank<global rank>); limit_s <= 0: never stalls.
  StallWatchdog(const std::string& dir, const std::vector<int>& global_ranks, double limit_s);

  const std::string& page_path(int local_rank) const;
  // The worker runs ddp.cpp and answers SIGUSR1 with its flight record.
  bool attached(int local_rank) const;
  // How many SIGUSR1 requests the worker has answered (every group's record written, flight_progress.h).
  uint64_t dumps(int local_rank) const;
  // Zeroes the worker's page (before it is started again).
  void reset(int local_rank);
  // The worker that has waited longest past the limit at steady time `now_ns`, if any. `running[i]`: only
  // live workers count.
  std::optional<Stall> check(int64_t now_ns, const std::vector<bool>& running) const;
  double limit_s() const { return limit_s_; }

 private:
  std::vector<std::unique_ptr<dist::FlightProgressWatch>> pages_;
  double limit_s_;
};

}  // namespace ddp::launch
