// flight_analysis.h - puts the ranks' flight recorder dumps (flight_dump_reader.h) side by side and finds
// where they diverge, as data: per group, the divergences found (a rank that never issued a collective the
// others wait on, ranks that called different collectives at one sequence number, a rank ahead of another,
// a collective completed on some ranks only, a rank that left no dump, rings that do not overlap) with one
// sentence each, the one to lead with first. ddp_flight (tools/ddp_flight.cpp) prints it; the report's text
// and Chrome trace are in flight_report.h. How to read it: docs/debugging.md "Reading dumps with ddp_flight".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/flight_dump_reader.h"

namespace ddp::dist::flight {

enum class DivergenceKind {
  Mismatch,      // at one seq the ranks called different collectives (op, dtype, count, reduce op, root)
                 // or different DDP buckets
  MissingIssue,  // a rank never issued a collective the others issued and did not complete
  UnevenSteps,   // MissingIssue where the behind rank had finished (its group was destroyed: reason exit)
  NoDump,        // a rank of the world left no record of the group (crashed, killed, stopped)
  NoOverlap,     // the rings do not overlap: the seq to compare is older than a rank's window
  PartialCompletion,  // a collective completed on some ranks and not on others
  AllWaiting,         // every rank issued the collective and none completed it
  RankAhead,          // a rank issued more collectives than another (kind 3); with `completed_ahead` the
                      // ahead rank completed them, so the behind rank was only dumped earlier
  RecorderOff,        // a rank's record has capacity 0 (DDP_FLIGHT_RECORDER_ENTRIES=0)
  Nothing,            // every rank completed every collective in the window
};
const char* divergence_kind_name(DivergenceKind k);  // "missing issue", "mismatch", ...

struct Divergence {
  DivergenceKind kind = DivergenceKind::Nothing;
  uint64_t seq = 0;         // the collective it is about (Nothing: the last seq every rank completed)
  std::vector<int> ranks;   // the ranks it is about: the one that never issued / the odd side of a mismatch /
                            // the ahead rank / the ranks without a dump / the ranks that did not complete
  std::vector<int> others;  // the other side: the ranks that waited / the majority / the behind rank /
                            // the ranks that completed
  std::string field;        // Mismatch: what differs ("count", "dtype and count", "bucket")
  int64_t ahead_by = 0;     // MissingIssue, UnevenSteps, RankAhead: collectives between the two ranks' ends
  bool completed_ahead = false;  // RankAhead: the ahead ranks completed all of their extra collectives
  int64_t waited_min_ns = -1, waited_max_ns = -1;  // how long `others` (or `ranks`) waited; -1 unknown
  std::string sentence;                            // one sentence a person can act on
};

struct GroupAnalysis {
  std::string group;
  std::string backend;
  int world_size = 0;
  std::vector<std::shared_ptr<const GroupRecord>> ranks;  // by rank; null: that rank left no record
  std::vector<Divergence> divergences;            // the one to lead with first, then in order of seq
  uint64_t focus_seq = 0;                         // the collective the table centres on
  bool diverged() const {
    return !divergences.empty() && divergences.front().kind != DivergenceKind::Nothing;
  }
  const Divergence& lead() const { return divergences.front(); }
};

struct FlightAnalysis {
  std::vector<GroupAnalysis> groups;  // top-level groups (no '/') first, then inner ones, each by name
  // The group whose first divergence leads the report: one whose finding names a rank that broke the step
  // (mismatch, missing issue, uneven steps, no dump, completed on some ranks only), top-level groups before
  // inner ones; else one with any other finding, top-level first; else the first group.
  size_t lead = 0;
  // Two top-level groups whose ranks wait on each other (in one group rank A waits on a collective rank B
  // never issued, in the other B waits on one A never issued): one sentence naming both waits, else "". It
  // leads then.
  std::string cross_group;
  // The one sentence to print first: cross_group, else the lead group's (naming the group when there are
  // several).
  std::string headline;
};

// Analyses every group of `records` (merged: one record per group and rank, merge_flight_records), or only
// the group named `only_group` ("" = all; a name no record has is a ddp::Error listing the names there are).
FlightAnalysis analyze_flight(const std::vector<GroupRecord>& records, const std::string& only_group = "");

// The cross_group sentence of analysed groups ("" when no two groups wait on each other).
std::string cross_group_wait(const std::vector<GroupAnalysis>& groups);

// One group's analysis; `records` are that group's (any order, one per rank).
GroupAnalysis analyze_group(const std::vector<GroupRecord>& records);

// "rank 1", "ranks 0 and 2", "ranks 0, 2 and 3", "ranks 0-3" (runs of three or more are ranges).
std::string rank_list_text(std::vector<int> ranks);
// "7.9 ms", "600 s", "12 us".
std::string duration_text(int64_t ns);
// "1.2 MiB", "512 B".
std::string bytes_text(int64_t bytes);
// Bytes one rank contributes: bucket_bytes when known, else count x the dtype's size (-1: unknown dtype).
int64_t entry_bytes(const DumpEntry& e);
// "(bucket 3: a .. b, 1.2 MiB, iteration 402)" / "(sync batchnorm, float32 x 1024, iteration 7)".
std::string entry_context(const DumpEntry& e);

}  // namespace ddp::dist::flight
