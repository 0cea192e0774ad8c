// step_explain.h - the plain-language account of one synchronized iteration across all ranks ("explain":
// train --explain N, or DDP_EXPLAIN=N for any program using DistributedDataParallel). Built from the
// reducer's own per-bucket records (BucketTiming: when a bucket's last gradient arrived, when its all-reduce
// was issued and when it completed - the same time points the trace's "allreduce bucket <i>" events are
// written from), each rank's put on rank 0's clock (runtime/trace/clock_sync.h). Per rank: each bucket's
// parameters and bytes and its times, how long the rank waited for communication after backward and on which
// bucket; across ranks: when each all-reduce could start (the last rank issued it), the slowest rank and by
// how much, and the parameters that got no gradient; optionally the simulator's view of other bucket caps.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ddp/iteration_stats.h"

namespace ddp {

// A bucket of the layout (the same on every rank).
struct ExplainBucket {
  int64_t bytes = 0;
  size_t num_params = 0;
  std::string first_param, last_param;  // in bucket order
};

// One rank's record of the iteration. Times of `buckets` are seconds since this rank's forward end.
struct ExplainRank {
  int rank = 0;
  bool shadow = false;            // Join: this rank had no batch and shadowed the others' collectives
  double forward_end_s = 0;       // on rank 0's clock (seconds since rank 0's tracer started)
  double clock_error_s = 0;       // the bound of this rank's clock offset
  double backward_compute_s = 0;  // forward end -> backward's last node
  double exposed_s = 0;           // backward's last node -> buckets reduced and written back
  std::vector<BucketTiming> buckets;
  std::vector<std::string> no_gradient;  // parameters that got no gradient on this rank
};

// What the bucket simulator predicts for other caps (rows from sim::sweep_caps), and on what it is based.
// With a given layout (ZeRO-3's units: the cap does not shape the buckets) there is one row, this run's
// buckets (cap_mb 0), and no other cap is offered.
struct ExplainWhatIf {
  struct Row {
    double cap_mb = 0;
    size_t buckets = 0;
    double exposed_s = 0;
    double step_s = 0;  // predicted backward + exposed (what the cap can change)
  };
  std::vector<Row> rows;
  double current_cap_mb = 0;
  std::string basis;  // e.g. "rank 0's ready times, network fitted to this step's buckets: ring, alpha ..."
  // What a bucket's communication is ("all-reduce"; ZeRO-2/3: "reduce-scatter"), and whether the buckets
  // were given (ReducerOptions::layout) rather than built by the cap.
  std::string collective = "all-reduce";
  bool layout_given = false;
};

// The account, several lines ending in '\n'. `word` names an iteration ("step" in train). Throws
// ddp::Error when a rank's record does not match the layout.
std::string explain_iteration(const std::string& word, int64_t number,
                              const std::vector<ExplainBucket>& layout, const std::vector<ExplainRank>& ranks,
                              const ExplainWhatIf* what_if = nullptr);

}  // namespace ddp

namespace ddp {

// The iteration DDP_EXPLAIN names (a whole number >= 1), 0 when it is unset or empty. Anything else is an
// error naming the variable.
int64_t explain_iteration_from_env();

}  // namespace ddp
