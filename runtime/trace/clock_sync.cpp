// clock_sync.cpp - the round-trip estimate of this rank's trace clock offset to rank 0 (see clock_sync.h).
#include "runtime/trace/clock_sync.h"

#include <limits>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"

namespace ddp::trace {

ClockSync estimate_clock_offset(dist::ProcessGroup& pg, const Tracer& tracer, int rounds) {
  DDP_CHECK(rounds >= 1 && rounds <= 1000, "estimate_clock_offset: rounds = ", rounds,
            "; give 1..1000 round trips (", kDefaultClockSyncRounds, " is plenty)");
  const bool reference = pg.rank() == 0;
  // Rank 0's start_unix_us travels with the first all-reduce: it names the common clock in every file.
  auto exchange = [&](int64_t value_of_rank0) {
    dist::FlightIssuer who("trace clock sync");  // the flight recorder's tag of these all-reduces
    Tensor t = Tensor::from_data<int64_t>({reference ? value_of_rank0 : 0}, {1});
    host_allreduce(pg, t, dist::ReduceOp::Sum);
    return t.data<int64_t>()[0];
  };
  ClockSync sync;
  sync.reference_rank = 0;
  if (pg.size() == 1) {
    sync.reference_start_unix_us = tracer.start_unix_us();
    return sync;
  }
  // before[k]: this rank's clock just before entering all-reduce k; after[k]: just after it returned.
  std::vector<int64_t> before(static_cast<size_t>(rounds) + 1), after(before.size()),
      rank0_time(before.size());
  before[0] = tracer.now_ns();
  sync.reference_start_unix_us = exchange(tracer.start_unix_us());
  after[0] = tracer.now_ns();
  for (size_t k = 1; k < before.size(); ++k) {
    before[k] = tracer.now_ns();  // rank 0: its reading, taken right after all-reduce k-1 returned
    rank0_time[k] = exchange(before[k]);
    after[k] = tracer.now_ns();
  }
  if (reference) {
    sync.rounds = rounds;
    return sync;  // offset 0, bound 0
  }
  int64_t best_interval = std::numeric_limits<int64_t>::max();
  for (size_t k = 1; k < before.size(); ++k) {
    const int64_t interval = after[k] - before[k - 1];
    if (interval >= best_interval) continue;
    best_interval = interval;
    const int64_t midpoint = before[k - 1] + interval / 2;
    sync.offset_ns = rank0_time[k] - midpoint;
    sync.error_bound_ns = interval - interval / 2;  // the longer half: the bound holds with integer division
  }
  sync.rounds = rounds;
  return sync;
}

void synchronize_trace_clock(dist::ProcessGroup& pg, Tracer& tracer, int rounds) {
  tracer.set_clock_sync(estimate_clock_offset(pg, tracer, rounds));
}

}  // namespace ddp::trace
