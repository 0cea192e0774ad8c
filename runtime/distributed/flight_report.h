// flight_report.h - what ddp_flight prints and writes from a FlightAnalysis (flight_analysis.h): the text
// report (the headline sentence first, then per group a table of the collectives around the divergence side
// by side per rank, the ranks' records and the list of divergences), and a Chrome trace of the dumped window
// with every rank as one process on the common wall clock. Examples: docs/debugging.md "Reading dumps with
// ddp_flight".
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/distributed/flight_analysis.h"

namespace ddp::dist::flight {

struct ReportOptions {
  size_t last = 8;          // table rows per group (>= 1)
  size_t rank_columns = 8;  // ranks shown side by side; the ones a divergence names come first
};

// The whole report; its first line is analysis.headline.
std::string format_flight_report(const FlightAnalysis& analysis, const ReportOptions& options = {});

// One group's table of the `last` collectives around its focus seq ("" when it recorded none).
std::string format_flight_table(const GroupAnalysis& group, const ReportOptions& options = {});

// Chrome trace JSON (chrome://tracing, Perfetto) of `records`: one process per rank (its global rank when
// known), one thread per group; each collective a complete event named "allreduce #12" from started (or
// issued) to ended (or the dump time while pending) with args group, seq, op, dtype, count, bucket, params,
// bytes, iteration, state, issuer (and device_dur_us for an NCCL record's GPU time); events sorted by time,
// ts in microseconds since the earliest event (otherData.t0_unix_ns).
std::string flight_chrome_trace(const std::vector<GroupRecord>& records);

}  // namespace ddp::dist::flight
