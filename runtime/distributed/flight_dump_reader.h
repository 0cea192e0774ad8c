// flight_dump_reader.h - loads flight recorder dumps (docs/debugging.md "Flight recorder": group records
// flight.rank<R>[.<group>].json and process records {"groups": [...]}, schema versions 1 and 2) into plain
// structs for the analyzer (flight_analysis.h). Every bad input is a ddp::Error naming the file and the fix:
// not JSON, an unknown version, a document of neither kind, a missing or mistyped field, two records of one
// group and rank from different processes, records of one group that disagree on the world size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::dist::flight {

// One recorded collective. Optional numbers are -1 when absent (null, or a version-1 record).
struct DumpEntry {
  uint64_t seq = 0;
  std::string op, dtype, reduce_op;
  int64_t count = 0;
  int64_t root = -1;
  std::string state;   // issued | started | completed | failed
  std::string issuer;  // "ddp bucket", "user", ...
  int64_t iteration = -1;
  int64_t bucket = -1;        // DDP bucket index
  int64_t bucket_bytes = -1;  // bytes of the bucket
  std::string params;         // "first .. last" parameter names of the bucket, or ""
  int64_t issued_ns = -1, started_ns = -1, ended_ns = -1;  // steady clock of the dumping process
  int64_t device_duration_ns = -1;  // NCCL: the GPU's time between the collective's CUDA events

  bool completed() const { return state == "completed"; }
  bool failed() const { return state == "failed"; }
  // Neither completed nor failed: still waiting when the record was written.
  bool pending() const { return !completed() && !failed(); }
  // Same collective call: op, dtype, count, reduce op and root.
  bool same_call(const DumpEntry& o) const {
    return op == o.op && dtype == o.dtype && count == o.count && reduce_op == o.reduce_op && root == o.root;
  }
};

// One group's record on one rank.
struct GroupRecord {
  std::string file;  // where it was read ("dir/flight.rank0.json", or "dir/proc.json groups[2]")
  int version = 0;
  std::string group, backend;
  int rank = 0, world_size = 0;
  int64_t capacity = 0;
  uint64_t recorded = 0;  // collectives issued so far: seqs [0, recorded) were issued
  int64_t pid = -1;       // -1: unknown (version 1)
  std::string host;
  int64_t global_rank = -1;
  std::string reason;           // failure | signal | exit | demand, "" when unknown
  int64_t dumped_unix_ns = -1;  // -1: unknown
  int64_t clock_steady_ns = 0, clock_unix_ns = 0;
  std::string failure;             // the group's first failure message, "" when none
  std::vector<DumpEntry> entries;  // oldest first, seqs ascending

  // A steady timestamp of this process on the wall clock (ns since the epoch); -1 stays -1.
  int64_t to_unix(int64_t steady_ns) const {
    return steady_ns < 0 ? -1 : steady_ns - clock_steady_ns + clock_unix_ns;
  }
  // The oldest seq in the ring (recorded when the ring is empty).
  uint64_t first_seq() const { return entries.empty() ? recorded : entries.front().seq; }
  // The entry with this seq, or null when it is not in the window.
  const DumpEntry* find(uint64_t seq) const;
  // An inner group (hier's "pg0/host1"): its name holds a '/'.
  bool inner() const { return group.find('/') != std::string::npos; }
};

// The newest schema version this reader knows.
constexpr int kNewestFlightSchema = 2;

// Parses one file's text (a group record or a process record). `source` names it in errors.
std::vector<GroupRecord> parse_flight_dump(const std::string& json_text, const std::string& source);

// Loads files and directories (every *.json directly inside a directory, in name order), then drops exact
// repeats (the same group, rank and process dumped twice, e.g. a failure dump and a later SIGUSR1 dump: the
// one with more collectives recorded, then the later dump, wins). Throws ddp::Error on bad input.
std::vector<GroupRecord> load_flight_dumps(const std::vector<std::string>& paths);

// The same check load_flight_dumps applies, on records already parsed.
std::vector<GroupRecord> merge_flight_records(std::vector<GroupRecord> records);

}  // namespace ddp::dist::flight
