// stall_watchdog.cpp - the progress pages of ddprun's workers and the stall rule (see stall_watchdog.h).
#include "runtime/launch/stall_watchdog.h"

namespace ddp::launch {

StallWatchdog::StallWatchdog(const std::string& dir, const std::vector<int>& global_ranks, double limit_s)
    : limit_s_(limit_s) {
  for (int r : global_ranks)
    pages_.push_back(std::make_unique<dist::FlightProgressWatch>(dir + "/progress.rank" + std::to_string(r)));
}

const std::string& StallWatchdog::page_path(int local_rank) const {
  return pages_.at(static_cast<size_t>(local_rank))->path();
}

bool StallWatchdog::attached(int local_rank) const {
  return pages_.at(static_cast<size_t>(local_rank))->read().attached;
}

uint64_t StallWatchdog::dumps(int local_rank) const {
  return pages_.at(static_cast<size_t>(local_rank))->read().dumps;
}

void StallWatchdog::reset(int local_rank) { pages_.at(static_cast<size_t>(local_rank))->reset(); }

std::optional<Stall> StallWatchdog::check(int64_t now_ns, const std::vector<bool>& running) const {
  if (!(limit_s_ > 0)) return std::nullopt;
  std::optional<Stall> worst;
  for (size_t i = 0; i < pages_.size(); ++i) {
    if (i >= running.size() || !running[i]) continue;
    const auto s = pages_[i]->read();
    if (!s.attached || s.pending() == 0) continue;
    const double waited = static_cast<double>(now_ns - s.last_change_ns) * 1e-9;
    if (waited <= limit_s_) continue;
    if (!worst || waited > worst->waited_s) worst = Stall{static_cast<int>(i), s.pending(), waited};
  }
  return worst;
}

}  // namespace ddp::launch
