// flight_recorder.h - a per-group, per-rank ring of the most recent collectives (issued / started / completed /
// failed, with host timestamps), dumped as JSON on demand, on a collective failure (timeout, mismatch) when
// DDP_FLIGHT_RECORDER_DIR is set, so that a hang can be read after the fact. Schema and variables:
// docs/debugging.md "Flight recorder".
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

// Names who issues the collectives of this thread while it lives ("ddp bucket", "zero", ...); `tag` must
// outlive the scope (a string literal). Nested scopes restore the outer tag. Default: "user".
class FlightIssuer {
 public:
  explicit FlightIssuer(const char* tag);
  ~FlightIssuer();
  FlightIssuer(const FlightIssuer&) = delete;
  FlightIssuer& operator=(const FlightIssuer&) = delete;

 private:
  const char* previous_;
};

// DDP_FLIGHT_RECORDER_ENTRIES: unset -> 2000, "0" -> off; anything but a whole number in [0, 10000000] is a
// ddp::Error naming the variable.
size_t flight_recorder_entries_from_env();

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
  char issuer[24] = {};
};

class FlightRecorder {
 public:
  // capacity 0: records nothing.
  FlightRecorder(std::string backend, int rank, int size, size_t capacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Set once, before the first collective (the store prefix is known only after the base is built).
  void set_group_name(std::string name) { group_ = std::move(name); }
  const std::string& group_name() const { return group_; }
  size_t capacity() const { return ring_.size(); }

  // d.seq must be set. Later calls for a sequence number whose slot a newer collective took are ignored.
  void issued(const CollectiveDesc& d);
  void started(uint64_t seq);
  void completed(uint64_t seq);
  void failed(uint64_t seq, const std::string& why);

  // The recorded collectives, oldest first (at most capacity()).
  std::vector<FlightEntry> entries() const;
  // The JSON document of this recorder (schema in docs/debugging.md).
  std::string to_json() const;
  // Writes to_json() to `path`; throws ddp::Error naming the path when it cannot.
  void dump(const std::string& path) const;

 private:
  void transition(uint64_t seq, FlightState s);

  std::string backend_;
  std::string group_;
  int rank_, size_;
  int64_t anchor_steady_ns_, anchor_unix_ns_;  // the same instant on both clocks
  mutable std::mutex mu_;                     // guards ring_, recorded_, failure_
  std::vector<FlightEntry> ring_;
  uint64_t recorded_ = 0;  // collectives issued so far; the newest is seq recorded_-1's slot
  std::string failure_;
};

// Writes every live recorder of this process into one JSON file at `path` ({"version":1,"groups":[...]}).
void dump_flight_record(const std::string& path);

// Failure dumps: DDP_FLIGHT_RECORDER_DIR, or "" when unset (then nothing is written on failure).
std::string flight_recorder_dir_from_env();

}  // namespace ddp::dist
