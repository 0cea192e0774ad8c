// trace_ready_times.cpp - cuts a trace into iterations and collects ready instants relative to backward.
#include "runtime/sim/trace_ready_times.h"

#include <map>

#include "runtime/core/error.h"
#include "runtime/sim/sample_stats.h"

namespace ddp::sim {

MeasuredReadyTimes ready_times_from_trace(const trace::LoadedTrace& trace,
                                          const std::vector<std::string>& names, int rank) {
  // Iteration windows [begin, end) of this rank.
  std::vector<std::pair<double, double>> windows;
  for (const auto& e : trace.events)
    if (e.pid == rank && e.phase == 'X' && e.category == "iteration")
      windows.push_back({e.ts_us, e.ts_us + e.dur_us});
  DDP_CHECK(!windows.empty(), "bucket simulator: the trace has no iteration markers for rank ", rank,
            "; record it with bench_e2e --trace");
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names.size(); ++i) index[names[i]] = i;

  std::vector<std::vector<double>> per_param(names.size());
  std::vector<double> backward_lengths;
  std::string first_missing;
  size_t complete = 0;
  for (const auto& [begin, end] : windows) {
    double bwd_start = -1, bwd_len = 0;
    std::vector<double> ready(names.size(), -1);
    for (const auto& e : trace.events) {
      if (e.pid != rank || e.ts_us < begin || e.ts_us >= end) continue;
      if (e.phase == 'X' && e.category == "backward" && e.name == "backward") {
        bwd_start = e.ts_us;
        bwd_len = e.dur_us;
      } else if (e.phase == 'i' && e.name.rfind("ready ", 0) == 0) {
        auto it = index.find(e.name.substr(6));
        if (it != index.end()) ready[it->second] = e.ts_us;
      }
    }
    if (bwd_start < 0) continue;
    bool all = true;
    for (size_t i = 0; i < names.size() && all; ++i)
      if (ready[i] < 0) {
        all = false;
        if (first_missing.empty()) first_missing = names[i];
      }
    if (!all) continue;
    ++complete;
    backward_lengths.push_back(bwd_len * 1e-6);
    for (size_t i = 0; i < names.size(); ++i)
      per_param[i].push_back(std::max(0.0, (ready[i] - bwd_start) * 1e-6));
  }
  DDP_CHECK(complete > 0, "bucket simulator: no iteration of rank ", rank,
            " in the trace has a \"backward\" event and a ready instant for every parameter",
            first_missing.empty() ? std::string() : " (first missing: ready " + first_missing + ")",
            "; was it recorded by bench_e2e --trace in mode ddp with the same model?");
  MeasuredReadyTimes out;
  out.iterations = complete;
  out.backward_s = percentile(backward_lengths, 0.5);
  for (auto& v : per_param) out.ready_s.push_back(percentile(v, 0.5));
  return out;
}

}  // namespace ddp::sim
