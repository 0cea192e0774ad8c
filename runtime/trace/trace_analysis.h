// trace_analysis.h - reads a Chrome trace (one rank or merged) and computes per-iteration, per-rank step
// statistics: forward, backward and communication time, exposed communication, overlap, slowest bucket.
// Definitions (docs/trace.md, "What the summary measures"): all times are lengths of unions of intervals,
// so nested or parallel events are not double counted.
//   forward_us / backward_us / comm_us: |union of complete events of category forward / backward / comm|
//   exposed_comm_us: max(0, end of the last comm event - end of the last backward event); with no backward
//                    event it is comm_us; with no comm event it is 0
//   overlap_ratio:   |union(comm) intersect union(backward)| / comm_us (0 when comm_us is 0)
//   slowest bucket:  the comm event with the longest dur, with its args "bucket" and "bytes"
// An event belongs to the iteration whose [begin, end) contains its start. With no iteration markers for a
// rank, all its events form one iteration numbered -1.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::trace {

// One event of a loaded trace (metadata events are folded into LoadedTrace's name maps).
struct TraceEvent {
  std::string name;
  std::string category;
  char phase = 'X';
  int64_t pid = 0;
  int64_t tid = 0;
  double ts_us = 0;
  double dur_us = 0;
  std::map<std::string, double> args;  // numeric args only
};

struct LoadedTrace {
  std::vector<TraceEvent> events;
  std::map<int64_t, std::string> process_names;
};

// Parses a Chrome trace (object with "traceEvents", or a bare array). Throws ddp::Error naming `source`.
LoadedTrace parse_chrome_trace(std::string_view json_text, const std::string& source = "<memory>");
LoadedTrace load_chrome_trace(const std::string& path);

struct BucketTiming {
  std::string name;     // empty when the iteration had no comm event
  int64_t bucket = -1;  // args "bucket", -1 when absent
  int64_t bytes = -1;   // args "bytes", -1 when absent
  double dur_us = 0;
};

struct IterationStats {
  int64_t rank = 0;
  int64_t iteration = -1;
  double step_us = 0;  // iteration marker length (span of its events when there are no markers)
  double forward_us = 0;
  double backward_us = 0;
  double comm_us = 0;
  double exposed_comm_us = 0;
  double overlap_ratio = 0;
  // ZeRO-2/3: forward and backward waiting for parameter all-gathers ("gather wait" spans); 0 otherwise.
  double gather_wait_us = 0;
  BucketTiming slowest_bucket;
};

struct RankSummary {
  int64_t rank = 0;
  std::vector<IterationStats> iterations;  // in iteration order
  // Medians over iterations of every number; slowest_bucket is the bucket most often slowest (lowest index on
  // a tie) with the median of the slowest durations.
  IterationStats median;
};

// Ranks in ascending order. Ranks with no forward/backward/comm/iteration event are left out.
std::vector<RankSummary> analyze_trace(const LoadedTrace& trace);

// A fixed-width text table of `summaries` (milliseconds), one row per iteration and a median row per rank.
std::string format_summary(const std::vector<RankSummary>& summaries);

// Length of the union of [begin, end) intervals, and of the intersection of two such unions.
double union_length(std::vector<std::pair<double, double>> intervals);
double intersection_length(std::vector<std::pair<double, double>> a,
                           std::vector<std::pair<double, double>> b);

}  // namespace ddp::trace
