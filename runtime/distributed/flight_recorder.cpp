// flight_recorder.cpp - the ring of recent collectives, its registry of live recorders and its JSON dump.
#include "runtime/distributed/flight_recorder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

namespace ddp::dist {

namespace {
constexpr int kSchemaVersion = 1;
constexpr size_t kDefaultEntries = 2000;
constexpr size_t kMaxEntries = 10000000;

std::atomic<int64_t> g_iteration{-1};
thread_local const char* t_issuer = "user";

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int64_t unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Live recorders, for dump_flight_record().
std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<const FlightRecorder*>& registry() {
  static std::vector<const FlightRecorder*> r;
  return r;
}
}  // namespace

const char* flight_state_name(FlightState s) {
  switch (s) {
    case FlightState::Issued: return "issued";
    case FlightState::Started: return "started";
    case FlightState::Completed: return "completed";
    case FlightState::Failed: return "failed";
  }
  return "?";
}

void set_flight_iteration(int64_t iteration) { g_iteration.store(iteration, std::memory_order_relaxed); }
int64_t flight_iteration() { return g_iteration.load(std::memory_order_relaxed); }

FlightIssuer::FlightIssuer(const char* tag) : previous_(t_issuer) { t_issuer = tag ? tag : "user"; }
FlightIssuer::~FlightIssuer() { t_issuer = previous_; }

size_t flight_recorder_entries_from_env() {
  const char* v = std::getenv("DDP_FLIGHT_RECORDER_ENTRIES");
  if (v == nullptr) return kDefaultEntries;
  const std::string s(v);
  const bool digits = !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  DDP_CHECK(digits && std::stoull(s) <= kMaxEntries, "DDP_FLIGHT_RECORDER_ENTRIES='", s,
            "' is not a number of entries: expected a whole number from 0 (recorder off) to ", kMaxEntries,
            " (default ", kDefaultEntries, "); unset it or fix it");
  return static_cast<size_t>(std::stoull(s));
}

std::string flight_recorder_dir_from_env() {
  const char* v = std::getenv("DDP_FLIGHT_RECORDER_DIR");
  return v ? std::string(v) : std::string();
}

FlightRecorder::FlightRecorder(std::string backend, int rank, int size, size_t capacity)
    : backend_(std::move(backend)),
      rank_(rank),
      size_(size),
      anchor_steady_ns_(steady_ns()),
      anchor_unix_ns_(unix_ns()),
      ring_(capacity) {
  std::lock_guard<std::mutex> g(registry_mu());
  registry().push_back(this);
}

FlightRecorder::~FlightRecorder() {
  std::lock_guard<std::mutex> g(registry_mu());
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), this), r.end());
}

void FlightRecorder::issued(const CollectiveDesc& d) {
  if (ring_.empty()) return;
  const int64_t now = steady_ns();
  const int64_t iteration = flight_iteration();
  const char* who = t_issuer;
  std::lock_guard<std::mutex> g(mu_);
  FlightEntry& e = ring_[d.seq % ring_.size()];
  e.seq = d.seq;
  e.kind = d.kind;
  e.dtype = d.dtype;
  e.op = d.op;
  e.state = FlightState::Issued;
  e.count = d.count;
  e.root = d.root;
  e.iteration = iteration;
  e.issued_ns = now;
  e.started_ns = 0;
  e.ended_ns = 0;
  std::strncpy(e.issuer, who, sizeof(e.issuer) - 1);
  e.issuer[sizeof(e.issuer) - 1] = '\0';
  recorded_ = std::max(recorded_, d.seq + 1);
}

void FlightRecorder::transition(uint64_t seq, FlightState s) {
  if (ring_.empty()) return;
  const int64_t now = steady_ns();
  std::lock_guard<std::mutex> g(mu_);
  FlightEntry& e = ring_[seq % ring_.size()];
  if (e.seq != seq || e.issued_ns == 0) return;  // overwritten by a newer collective
  e.state = s;
  if (s == FlightState::Started)
    e.started_ns = now;
  else
    e.ended_ns = now;
}

void FlightRecorder::started(uint64_t seq) { transition(seq, FlightState::Started); }
void FlightRecorder::completed(uint64_t seq) { transition(seq, FlightState::Completed); }
void FlightRecorder::failed(uint64_t seq, const std::string& why) {
  transition(seq, FlightState::Failed);
  std::lock_guard<std::mutex> g(mu_);
  if (failure_.empty()) failure_ = why;
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<FlightEntry> out;
  const uint64_t n = ring_.size();
  for (uint64_t seq = recorded_ > n ? recorded_ - n : 0; seq < recorded_; ++seq) {
    const FlightEntry& e = ring_[seq % n];
    if (e.seq == seq && e.issued_ns != 0) out.push_back(e);
  }
  return out;
}

std::string FlightRecorder::to_json() const {
  using nlohmann::json;
  const auto unix_of = [&](int64_t steady) -> json {
    return steady == 0 ? json(nullptr) : json(steady - anchor_steady_ns_ + anchor_unix_ns_);
  };
  json entries = json::array();
  for (const FlightEntry& e : this->entries()) {
    json j;
    j["seq"] = e.seq;
    j["op"] = collective_name(e.kind);
    j["dtype"] = std::string(dtype_name(e.dtype));
    j["count"] = e.count;
    j["reduce_op"] = reduce_op_name(e.op);
    j["root"] = e.root;
    j["state"] = flight_state_name(e.state);
    j["issuer"] = std::string(e.issuer);
    j["iteration"] = e.iteration;
    j["issued_ns"] = e.issued_ns;
    j["started_ns"] = e.started_ns == 0 ? json(nullptr) : json(e.started_ns);
    j["ended_ns"] = e.ended_ns == 0 ? json(nullptr) : json(e.ended_ns);
    j["issued_unix_ns"] = unix_of(e.issued_ns);
    j["duration_ns"] =
        e.started_ns != 0 && e.ended_ns != 0 ? json(e.ended_ns - e.started_ns) : json(nullptr);
    entries.push_back(std::move(j));
  }
  json doc;
  doc["version"] = kSchemaVersion;
  doc["group"] = group_;
  doc["backend"] = backend_;
  doc["rank"] = rank_;
  doc["world_size"] = size_;
  doc["capacity"] = ring_.size();
  doc["clock"] = {{"steady_ns", anchor_steady_ns_}, {"unix_ns", anchor_unix_ns_}};
  {
    std::lock_guard<std::mutex> g(mu_);
    doc["recorded"] = recorded_;
    doc["failure"] = failure_.empty() ? json(nullptr) : json(failure_);
  }
  doc["entries"] = std::move(entries);
  return doc.dump(1);
}

namespace {
void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  DDP_CHECK(f.good(), "flight recorder: cannot write '", path, "': check that its directory exists and is writable");
  f << text << '\n';
  f.close();
  DDP_CHECK(!f.fail(), "flight recorder: writing '", path, "' failed (disk full?)");
}
}  // namespace

void FlightRecorder::dump(const std::string& path) const { write_file(path, to_json()); }

void dump_flight_record(const std::string& path) {
  nlohmann::json groups = nlohmann::json::array();
  {
    std::lock_guard<std::mutex> g(registry_mu());
    for (const FlightRecorder* r : registry()) groups.push_back(nlohmann::json::parse(r->to_json()));
  }
  nlohmann::json doc;
  doc["version"] = kSchemaVersion;
  doc["groups"] = std::move(groups);
  write_file(path, doc.dump(1));
}

}  // namespace ddp::dist
