// trace_ready_times.h - measured gradient-ready times for the bucket simulator, read from a ddp.cpp Chrome
// trace (bench_e2e --trace): per iteration of one rank, the time of each "ready <param name>" instant (the
// reducer's hook) minus the start of that iteration's "backward" complete event; the median over iterations.
#pragma once
#include <string>
#include <vector>

#include "runtime/trace/trace_analysis.h"

namespace ddp::sim {

struct MeasuredReadyTimes {
  std::vector<double> ready_s;  // per parameter, in the order of the names given
  double backward_s = 0;        // median length of the "backward" events
  size_t iterations = 0;        // iterations that had every parameter's ready instant
};

// Throws ddp::Error when no iteration of `rank` has a backward event and a ready instant for every name
// (naming the first missing parameter).
MeasuredReadyTimes ready_times_from_trace(const trace::LoadedTrace& trace,
                                          const std::vector<std::string>& names, int rank);

}  // namespace ddp::sim
