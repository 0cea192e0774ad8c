// clock_sync.h - puts every rank's trace on rank 0's clock: estimate_clock_offset measures, with a few
// all-reduce round trips at start-up, how far this rank's tracer clock is from rank 0's, and bounds the
// error. Each tracer counts from its own construction (and hosts' clocks differ), so without this a merged
// trace can only line ranks up by their wall clocks, and the wait of a fast rank for a slow one is hidden or
// invented.
//
// Method (collective, every rank calls it): rounds + 1 all-reduces of one int64. Rank 0 reads its clock right
// after all-reduce k-1 returns - by then every rank has entered k-1 - and contributes that time to all-reduce
// k, which cannot return on rank r before rank 0 entered it. So rank 0's reading lies, on rank r's clock,
// between r's clock read just before entering k-1 and r's read just after k returned: the offset is
// (rank 0's reading - the midpoint) and the error at most half that interval. The round with the shortest
// interval wins. The bound holds whatever the transport's latency or asymmetry; it only gets wider.
#pragma once
#include "runtime/distributed/process_group.h"
#include "runtime/trace/trace.h"

namespace ddp::trace {

inline constexpr int kDefaultClockSyncRounds = 16;

// This rank's ClockSync against rank 0 (offset 0, bound 0 on rank 0 and in a world of one). Host all-reduces
// on `pg`; `tracer` gives the clock (its now_ns). Throws on a bad `rounds` (1..1000) or a failed collective.
ClockSync estimate_clock_offset(dist::ProcessGroup& pg, const Tracer& tracer,
                                int rounds = kDefaultClockSyncRounds);

// Estimates and records it in `tracer` (set_clock_sync): what train and bench_e2e call before tracing.
void synchronize_trace_clock(dist::ProcessGroup& pg, Tracer& tracer, int rounds = kDefaultClockSyncRounds);

}  // namespace ddp::trace
