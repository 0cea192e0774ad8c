// flight_recorder.cpp - the ring of recent collectives, its registry of live recorders, its JSON dump and the
// SIGUSR1 handler that makes every recorder of the process write its file.
#include "runtime/distributed/flight_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/distributed/flight_progress.h"

namespace ddp::dist {

namespace {
constexpr int kSchemaVersion = 2;
constexpr size_t kDefaultEntries = 2000;
constexpr size_t kMaxEntries = 10000000;

std::atomic<int64_t> g_iteration{-1};
thread_local FlightIssuerInfo t_issuer;

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

FlightIssuer::FlightIssuer(const char* tag) : previous_(t_issuer) {
  t_issuer = FlightIssuerInfo{tag ? tag : "user", -1, 0, nullptr};
}
FlightIssuer::FlightIssuer(const char* tag, int bucket, int64_t bucket_bytes, const char* params)
    : previous_(t_issuer) {
  t_issuer = FlightIssuerInfo{tag ? tag : "user", bucket, bucket_bytes, params};
}
FlightIssuer::~FlightIssuer() { t_issuer = previous_; }

namespace {
// SIGUSR1: the handler only writes a byte into a pipe (async-signal-safe); a thread of ours reads it, writes
// the records and then counts the answer on the progress page. Installed once, by the first recorder that has
// a dump directory or a launcher's progress page.
int g_signal_pipe[2] = {-1, -1};

void on_sigusr1(int) {
  const int saved = errno;
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

void install_dump_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      DDP_LOG(Warn, "flight recorder: pipe2 failed (", std::strerror(errno), "); SIGUSR1 will not dump");
      return;
    }
    // The reading end blocks; the writing end stays non-blocking (a full pipe drops a signal, never hangs).
    ::fcntl(g_signal_pipe[0], F_SETFL, ::fcntl(g_signal_pipe[0], F_GETFL) & ~O_NONBLOCK);
    std::thread([] {
      char buf[64];
      for (;;) {
        ssize_t n = ::read(g_signal_pipe[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        dump_flight_records_to_dirs("signal");
        flight_progress_dumped();  // after the last file: the launcher may stop the process now
      }
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (::sigaction(SIGUSR1, &sa, nullptr) != 0)
      DDP_LOG(Warn, "flight recorder: sigaction(SIGUSR1) failed: ", std::strerror(errno));
  });
}

int env_global_rank() {
  const char* v = std::getenv("RANK");
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  long r = std::strtol(v, &end, 10);
  return end && *end == '\0' && r >= 0 && r < (1L << 30) ? static_cast<int>(r) : -1;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}
}  // namespace

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

FlightRecorder::FlightRecorder(std::string backend, int rank, int size, size_t capacity, std::string dump_dir)
    : backend_(std::move(backend)),
      dump_dir_(std::move(dump_dir)),
      rank_(rank),
      size_(size),
      anchor_steady_ns_(steady_ns()),
      anchor_unix_ns_(unix_ns()),
      ring_(capacity) {
  // The handler first, then the progress page: an attached page tells the launcher that this process answers
  // SIGUSR1, so the handler must exist by then - also with the recorder off (capacity 0), which answers with
  // no file. Without it ddprun's SIGUSR1 would kill the process (issue 36).
  const char* progress = std::getenv("DDP_FLIGHT_PROGRESS_FILE");
  if (!dump_dir_.empty() || (progress != nullptr && *progress != '\0')) install_dump_signal();
  flight_progress_attach_from_env();
  std::lock_guard<std::mutex> g(registry_mu());
  registry().push_back(this);
}

FlightRecorder::~FlightRecorder() {
  std::lock_guard<std::mutex> g(registry_mu());
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), this), r.end());
}

void FlightRecorder::issued(const CollectiveDesc& d) {
  const int64_t now = steady_ns();
  flight_progress_issued(now);
  if (ring_.empty()) return;
  const int64_t iteration = flight_iteration();
  const FlightIssuerInfo& who = t_issuer;
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
  e.device_ns = -1;
  e.bucket = who.bucket;
  e.bucket_bytes = who.bucket_bytes;
  std::strncpy(e.issuer, who.tag, sizeof(e.issuer) - 1);
  e.issuer[sizeof(e.issuer) - 1] = '\0';
  std::strncpy(e.params, who.params ? who.params : "", sizeof(e.params) - 1);
  e.params[sizeof(e.params) - 1] = '\0';
  recorded_ = std::max(recorded_, d.seq + 1);
}

void FlightRecorder::transition(uint64_t seq, FlightState s, int64_t device_ns) {
  const int64_t now = steady_ns();
  if (s == FlightState::Started)
    flight_progress_changed(now);
  else
    flight_progress_ended(now);
  if (ring_.empty()) return;
  std::lock_guard<std::mutex> g(mu_);
  FlightEntry& e = ring_[seq % ring_.size()];
  if (e.seq != seq || e.issued_ns == 0) return;  // overwritten by a newer collective
  e.state = s;
  if (s == FlightState::Started)
    e.started_ns = now;
  else
    e.ended_ns = now;
  if (device_ns >= 0) e.device_ns = device_ns;
}

void FlightRecorder::started(uint64_t seq) { transition(seq, FlightState::Started, -1); }
void FlightRecorder::completed(uint64_t seq, int64_t device_ns) {
  transition(seq, FlightState::Completed, device_ns);
}
void FlightRecorder::failed(uint64_t seq, const std::string& why) {
  transition(seq, FlightState::Failed, -1);
  std::lock_guard<std::mutex> g(mu_);
  if (failure_.empty()) failure_ = why;
}
bool FlightRecorder::has_failed() const {
  std::lock_guard<std::mutex> g(mu_);
  return !failure_.empty();
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

std::string FlightRecorder::to_json(const char* reason) const {
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
    j["device_duration_ns"] = e.device_ns >= 0 ? json(e.device_ns) : json(nullptr);
    j["bucket"] = e.bucket >= 0 ? json(e.bucket) : json(nullptr);
    j["bucket_bytes"] = e.bucket >= 0 ? json(e.bucket_bytes) : json(nullptr);
    j["params"] = e.params[0] != '\0' ? json(std::string(e.params)) : json(nullptr);
    entries.push_back(std::move(j));
  }
  json doc;
  doc["version"] = kSchemaVersion;
  doc["group"] = group_;
  doc["backend"] = backend_;
  doc["rank"] = rank_;
  doc["world_size"] = size_;
  doc["global_rank"] = env_global_rank();
  doc["pid"] = static_cast<int64_t>(::getpid());
  doc["host"] = host_name();
  doc["reason"] = reason;
  doc["dumped_unix_ns"] = unix_ns();
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
// Written beside and renamed into place: a reader (ddprun waiting for the records, ddp_flight) never sees
// half a file, also when the process is killed while writing.
void write_file(const std::string& path, const std::string& text) {
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    DDP_CHECK(f.good(), "flight recorder: cannot write '", path,
              "': check that its directory exists and is writable");
    f << text << '\n';
    f.close();
    if (f.fail()) {
      std::remove(tmp.c_str());
      DDP_FAIL("flight recorder: writing '", path, "' failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    DDP_FAIL("flight recorder: cannot rename '", tmp, "' to '", path, "': ", std::strerror(e));
  }
}
}  // namespace

void FlightRecorder::dump(const std::string& path, const char* reason) const {
  write_file(path, to_json(reason));
}

void FlightRecorder::set_group_name(std::string name) {
  std::lock_guard<std::mutex> g(registry_mu());
  group_ = std::move(name);
  named_file_ = group_.find('/') != std::string::npos;  // an inner group
  for (const FlightRecorder* r : registry()) {
    if (r == this) break;  // only groups made before this one
    if (r->rank_ == rank_ && r->dump_dir_ == dump_dir_ && !r->group_.empty() &&
        r->group_.find('/') == std::string::npos)
      named_file_ = true;  // this rank already has a first top-level group
  }
}

std::string FlightRecorder::dump_path() const {
  if (dump_dir_.empty() || ring_.empty()) return "";
  std::string name = group_;
  std::replace(name.begin(), name.end(), '/', '_');
  return dump_dir_ + "/flight.rank" + std::to_string(rank_) + (named_file_ ? "." + name : "") + ".json";
}

void FlightRecorder::dump_to_dir(const char* reason, bool log) const {
  const std::string path = dump_path();
  if (path.empty()) return;
  try {
    dump(path, reason);
    if (log && std::strcmp(reason, "failure") == 0)
      DDP_LOG(Error, backend_, " group '", group_, "': flight record written to ", path, " (", reason, ")");
    else if (log)
      DDP_LOG(Warn, backend_, " group '", group_, "': flight record written to ", path, " (", reason, ")");
  } catch (const std::exception& e) {
    DDP_LOG(Error, backend_, ": ", e.what());
  }
}

void dump_flight_records_to_dirs(const char* reason) {
  std::lock_guard<std::mutex> g(registry_mu());
  for (const FlightRecorder* r : registry()) r->dump_to_dir(reason);
}

void dump_flight_record(const std::string& path) {
  nlohmann::json groups = nlohmann::json::array();
  {
    std::lock_guard<std::mutex> g(registry_mu());
    for (const FlightRecorder* r : registry()) groups.push_back(nlohmann::json::parse(r->to_json("demand")));
  }
  nlohmann::json doc;
  doc["version"] = kSchemaVersion;
  doc["reason"] = "demand";
  doc["pid"] = static_cast<int64_t>(::getpid());
  doc["groups"] = std::move(groups);
  write_file(path, doc.dump(1));
}

}  // namespace ddp::dist
