// flight_recorder.h - a per-group, per-rank ring of the most recent collectives (issued / started / completed /
// failed, with host timestamps, who issued them: the DDP bucket with its parameters, the used-map, Join, ...),
// dumped as JSON so that a hang can be read after the fact: on demand, and - when DDP_FLIGHT_RECORDER_DIR is
// set - on a collective failure (timeout, mismatch), on SIGUSR1 and when the group is destroyed. tools/ddp_flight
// reads the dumps of all ranks. Schema and variables: docs/debugging.md "Flight recorder".
//
// Cost: the ring is allocated once when the group is made; recording a collective copies a few words and a
// fixed-size tag into its slot under one mutex (the issuing thread and the worker thread both write; the lock
// is uncontended except when both touch the ring at the same moment). No allocation per collective.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/distributed/collective.h"

namespace ddp::dist {

enum class FlightState : uint8_t { Issued, Started, Completed, Failed };
const char* flight_state_name(FlightState s);

// The training iteration the next collectives belong to, recorded with each one (-1: not set). Train and
// the reducer's callers set it; process-wide.
void set_flight_iteration(int64_t iteration);
int64_t flight_iteration();

// Who issues the collectives of a thread: a tag ("ddp bucket", "zero", ...) and, for a DDP bucket, its index,
// bytes and parameter range ("first .. last", truncated to FlightEntry::params).
struct FlightIssuerInfo {
  const char* tag = "user";
  int bucket = -1;
  int64_t bucket_bytes = 0;
  const char* params = nullptr;
};

// Names who issues the collectives of this thread while it lives; `tag` and `params` must outlive the scope
// (they are copied into the entry when a collective is issued). Nested scopes restore the outer one.
// Default: "user".
class FlightIssuer {
 public:
  explicit FlightIssuer(const char* tag);
  FlightIssuer(const char* tag, int bucket, int64_t bucket_bytes, const char* params);
  ~FlightIssuer();
  FlightIssuer(const FlightIssuer&) = delete;
  FlightIssuer& operator=(const FlightIssuer&) = delete;

 private:
  FlightIssuerInfo previous_;
};

// DDP_FLIGHT_RECORDER_ENTRIES: unset -> 2000, "0" -> off; anything but a whole number in [0, 10000000] is a
// ddp::Error naming the variable.
size_t flight_recorder_entries_from_env();
// DDP_FLIGHT_RECORDER_DIR, or "" when unset (then nothing is written on failure, signal or exit).
std::string flight_recorder_dir_from_env();

struct FlightEntry {
  uint64_t seq = 0;
  CollectiveKind kind = CollectiveKind::Barrier;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  FlightState state = FlightState::Issued;
  int64_t count = 0;
  int root = -1;
  int64_t iteration = -1;
  int64_t issued_ns = 0, started_ns = 0, ended_ns = 0;  // steady clock; 0 = not reached
  int64_t device_ns = -1;                               // the GPU's own duration (CUDA events), -1 unknown
  int32_t bucket = -1;                                  // DDP bucket index, -1 none
  int64_t bucket_bytes = 0;
  char issuer[24] = {};
  char params[96] = {};  // "first .. last" parameter of the bucket, "" none
};

class FlightRecorder {
 public:
  // capacity 0: records nothing. `dump_dir` "" writes nothing on failure, signal or exit (the default reads
  // DDP_FLIGHT_RECORDER_DIR). A non-empty one, or a launcher's progress page (DDP_FLIGHT_PROGRESS_FILE,
  // flight_progress.h, then attached), installs the SIGUSR1 handler - whatever the capacity, so that a
  // launcher's request never kills the process.
  FlightRecorder(std::string backend, int rank, int size, size_t capacity,
                 std::string dump_dir = flight_recorder_dir_from_env());
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Set once, before the first collective (the store prefix is known only after the base is built).
  // Also decides the dump file's name: the first top-level group of a rank writes flight.rank<R>.json, every
  // later one (ZeRO-3's gather group, a user's second group) and every inner group flight.rank<R>.<name>.json,
  // so that no group's record overwrites another's.
  void set_group_name(std::string name);
  const std::string& group_name() const { return group_; }
  size_t capacity() const { return ring_.size(); }

  // d.seq must be set. Later calls for a sequence number whose slot a newer collective took are ignored.
  void issued(const CollectiveDesc& d);
  void started(uint64_t seq);
  void completed(uint64_t seq, int64_t device_ns = -1);
  void failed(uint64_t seq, const std::string& why);
  bool has_failed() const;

  // The recorded collectives, oldest first (at most capacity()).
  std::vector<FlightEntry> entries() const;
  // The JSON document of this recorder (schema in docs/debugging.md); `reason` says why it is written
  // (failure | signal | exit | demand).
  std::string to_json(const char* reason = "demand") const;
  // Writes to_json() to `path`; throws ddp::Error naming the path when it cannot.
  void dump(const std::string& path, const char* reason = "demand") const;
  // Where this group's dumps go in the dump directory: <dir>/flight.rank<R>.json, R its rank in the group; a
  // group inside another (a name with '/', hier's "pg0/host1") adds its name: flight.rank<R>.pg0_host1.json.
  // "" when there is no dump directory or nothing is recorded.
  std::string dump_path() const;
  // Writes the record to dump_path() (when there is one) and, with `log`, says so in the log; errors are
  // logged, never thrown.
  void dump_to_dir(const char* reason, bool log = true) const;

 private:
  void transition(uint64_t seq, FlightState s, int64_t device_ns);

  std::string backend_;
  std::string group_;
  bool named_file_ = false;  // set_group_name: this group's dump file carries its name
  std::string dump_dir_;
  int rank_, size_;
  int64_t anchor_steady_ns_, anchor_unix_ns_;  // the same instant on both clocks
  mutable std::mutex mu_;                     // guards ring_, recorded_, failure_
  std::vector<FlightEntry> ring_;
  uint64_t recorded_ = 0;  // collectives issued so far; the newest is seq recorded_-1's slot
  std::string failure_;
};

// Writes every live recorder of this process into one JSON file at `path` ({"version":2,"groups":[...]}).
void dump_flight_record(const std::string& path);
// Every live recorder with a dump directory writes its own file there (what SIGUSR1 does).
void dump_flight_records_to_dirs(const char* reason);

}  // namespace ddp::dist
