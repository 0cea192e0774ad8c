// trace.h - timeline events of a training process, written as Chrome trace-event JSON (chrome://tracing,
// ui.perfetto.dev). One process per rank (pid = rank); lanes (tid) "compute", "comm", "iterations" and any
// named by add_lane(). Naming convention of train's step and the DDP reducer (the summary tool relies on it):
//   category "forward" / "backward" / "optimizer", lane compute: one complete event each per (micro-)step
//   category "comm", lane comm: "allreduce bucket <i>" with args {"bucket": i, "bytes": n, "params": k,
//   "first_param": name, "last_param": name}
//   instants on lane compute: "ready <param name>" (gradient hook) and "finalize" (category "ddp")
//   begin_iteration(i) / end_iteration(i): a complete event "iteration <i>" (category "iteration") on lane
//   "iterations" with args {"iteration": i}; the summary cuts per iteration on these. The number is the
//   step's as train logs it (from 1).
// Full table: docs/trace.md. Clocks: each tracer has its own time 0; set_clock_sync records the offset to
// rank 0's tracer (runtime/trace/clock_sync.h), which merge_chrome_traces uses to put ranks on one clock.
// Cost: disabled, every call site costs one relaxed atomic load and a branch (tracing_enabled(), TraceScope).
// Enabled, an event is appended to the calling thread's own buffer without a lock; buffers are merged when
// the trace is written. Details and the JSON layout: docs/trace.md.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ddp::trace {

// A lane is a Chrome "tid": one horizontal track under the rank's process.
using Lane = int32_t;
inline constexpr Lane kIterationLane = 0;  // "iterations"
inline constexpr Lane kComputeLane = 1;    // "compute"
inline constexpr Lane kCommLane = 2;       // "comm"
// Lanes are < kExtraTrackTidStride. The JSON writer puts events of a lane that partially overlap each other
// (Perfetto would drop them) on extra tracks with tid lane + k * kExtraTrackTidStride (k = 1, 2, ...).
inline constexpr Lane kExtraTrackTidStride = 1000;

// An integer argument of an event. `key` must be a string with static lifetime (a literal).
struct Arg {
  const char* key = nullptr;
  int64_t value = 0;
};
inline constexpr int kMaxArgs = 4;
// A text argument (a parameter name). `key` has static lifetime; the value is copied.
struct TextArg {
  const char* key = nullptr;
  std::string value;
};
inline constexpr int kMaxTextArgs = 2;

// One recorded event. Times are nanoseconds since the tracer's start (steady clock).
struct Event {
  std::string name;
  const char* category = "";  // static lifetime (a literal)
  int64_t ts_ns = 0;
  int64_t dur_ns = 0;  // complete events only
  Lane lane = kComputeLane;
  char phase = 'X';  // 'X' complete, 'i' instant
  uint8_t num_args = 0;
  uint8_t num_text_args = 0;
  std::array<Arg, kMaxArgs> args{};
  std::array<TextArg, kMaxTextArgs> text_args{};
};

// This tracer's clock against the reference tracer's (rank 0's): reference time = own time + offset_ns, up to
// error_bound_ns either way. Estimated by estimate_clock_offset (runtime/trace/clock_sync.h).
struct ClockSync {
  int64_t offset_ns = 0;
  int64_t error_bound_ns = 0;
  int rounds = 0;                        // round trips measured (0: none needed, this is the reference)
  int reference_rank = 0;
  int64_t reference_start_unix_us = 0;   // the reference tracer's start_unix_us: names the common clock
};

namespace detail {
struct ThreadBuffer;
// Mirrors global_tracer().enabled() so the disabled check needs no function call.
extern std::atomic<bool> g_tracing_enabled;
}  // namespace detail

class Tracer {
 public:
  Tracer();
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Recording calls are ignored while disabled (the default).
  void set_enabled(bool on);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // The Chrome pid of this process's events and the "rank N" process name. Default 0.
  void set_rank(int rank) { rank_.store(rank, std::memory_order_relaxed); }
  int rank() const { return rank_.load(std::memory_order_relaxed); }
  // The job's world size, written as otherData.world_size (0, the default: unknown, not written). Lets a
  // viewer tell a world of one, whose all-reduces are no-ops, from one rank's file of a larger job.
  void set_world_size(int world) { world_size_.store(world, std::memory_order_relaxed); }
  int world_size() const { return world_size_.load(std::memory_order_relaxed); }
  // The offset of this tracer's clock to the reference rank's, written as otherData.clock (docs/trace.md).
  void set_clock_sync(const ClockSync& sync);
  bool has_clock_sync() const;
  ClockSync clock_sync() const;
  // Names a new lane (for example "cuda compute stream") and returns its id.
  Lane add_lane(const std::string& name);

  // Nanoseconds since this tracer started, steady clock; and the conversion of a steady time point.
  int64_t now_ns() const { return to_trace_ns(std::chrono::steady_clock::now()); }
  int64_t to_trace_ns(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - start_).count();
  }
  // Wall-clock time (microseconds since the Unix epoch) of the tracer's time 0: aligns ranks' files.
  int64_t start_unix_us() const { return start_unix_us_; }

  // A complete event with explicit times (e.g. measured with CUDA events, converted with
  // to_trace_ns). At most kMaxArgs arguments.
  void complete(std::string_view name, const char* category, Lane lane, int64_t begin_ns, int64_t end_ns,
                std::initializer_list<Arg> args = {});
  // The same with text arguments (at most kMaxTextArgs), e.g. a bucket's first and last parameter names.
  void complete(std::string_view name, const char* category, Lane lane, int64_t begin_ns, int64_t end_ns,
                std::initializer_list<Arg> args, std::initializer_list<TextArg> text_args);
  // An instant marker at now_ns().
  void instant(std::string_view name, const char* category, Lane lane, std::initializer_list<Arg> args = {});
  // Iteration markers (main thread). end_iteration(i) records "iteration <i>" from the matching begin;
  // an end whose begin happened while tracing was off is ignored; a mismatched index is an error.
  void begin_iteration(int64_t iteration);
  void end_iteration(int64_t iteration);

  // All events recorded since start (or the last clear()), from every thread, sorted by start time.
  std::vector<Event> events() const;
  // Chrome trace JSON of events() with process/lane names and {"otherData": {rank, start_unix_us}}.
  std::string chrome_trace_json() const;
  // Writes chrome_trace_json() to `path` (via a temp file and rename). Throws ddp::Error naming the path.
  void write_chrome_trace(const std::string& path) const;
  // Forgets the events recorded so far (their memory is freed with the tracer). Safe while other threads
  // record: their later events are kept.
  void clear();

  // Hot path helper: `num_args` arguments from `args` (and `num_text` from `text`) go into the calling
  // thread's buffer.
  void record(std::string_view name, const char* category, Lane lane, char phase, int64_t ts_ns,
              int64_t dur_ns, const Arg* args, size_t num_args, const TextArg* text = nullptr,
              size_t num_text = 0);

 private:
  friend Tracer& global_tracer();
  explicit Tracer(bool is_global);
  detail::ThreadBuffer& local_buffer();
  detail::ThreadBuffer& register_thread();

  const uint64_t id_;  // unique per tracer, keys the thread-local buffer cache
  const bool is_global_;
  std::atomic<bool> enabled_{false};
  std::atomic<int> rank_{0};
  std::atomic<int> world_size_{0};
  const std::chrono::steady_clock::time_point start_;
  const int64_t start_unix_us_;
  std::atomic<int64_t> iteration_begin_ns_{-1};
  std::atomic<int64_t> open_iteration_{0};

  mutable std::mutex mutex_;  // guards the two containers below (registration, names), never the hot path
  std::vector<std::unique_ptr<detail::ThreadBuffer>> buffers_;
  std::unordered_map<std::thread::id, detail::ThreadBuffer*> buffer_of_thread_;
  std::map<Lane, std::string> lane_names_;
  bool has_clock_sync_ = false;  // guarded by mutex_, as is clock_sync_
  ClockSync clock_sync_;
};

// The process-wide tracer the runtime records into. Never destroyed (threads may record during exit).
Tracer& global_tracer();

// One relaxed load: whether the global tracer records. Guard any work that only builds an event's name.
inline bool tracing_enabled() { return detail::g_tracing_enabled.load(std::memory_order_relaxed); }

// Times its scope as a complete event on the global tracer. When tracing is disabled at construction it does
// nothing else (no clock read, no string copy).
class TraceScope {
 public:
  TraceScope(const char* category, std::string_view name, Lane lane = kComputeLane) {
    if (tracing_enabled()) [[unlikely]]
      start(category, name, lane);
  }
  ~TraceScope() {
    if (active_) [[unlikely]]
      finish();
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
  // Adds an integer argument (ignored when inactive or when kMaxArgs are already set).
  TraceScope& arg(const char* key, int64_t value) {
    if (active_ && num_args_ < kMaxArgs) args_[num_args_++] = {key, value};
    return *this;
  }

 private:
  void start(const char* category, std::string_view name, Lane lane);
  void finish();

  bool active_ = false;
  uint8_t num_args_ = 0;
  Lane lane_ = kComputeLane;
  const char* category_ = nullptr;
  int64_t begin_ns_ = 0;
  std::string name_;
  std::array<Arg, kMaxArgs> args_{};
};

// An instant on the global tracer when tracing is enabled.
inline void trace_instant(std::string_view name, const char* category, Lane lane = kComputeLane,
                          std::initializer_list<Arg> args = {}) {
  if (tracing_enabled()) [[unlikely]]
    global_tracer().instant(name, category, lane, args);
}

// The file name of one rank's trace: ".rank<R>" goes before the extension ("t.json" -> "t.rank1.json"; no
// extension: "t" -> "t.rank1"), the rule of train, bench_e2e and the flight recorder's dumps.
std::string rank_trace_path(const std::string& path, int rank);

// Merges per-rank trace files into one, events sorted by time (metadata first). When every input carries a
// clock sync against the same reference (otherData.clock), events go onto the reference rank's clock (each
// file's ts + its offset: the "common" clock); otherwise each file is shifted by (its start_unix_us - the
// earliest start_unix_us) ("wall" clock). otherData.clock of the output says which, with each rank's offset
// and error bound. Two inputs with the same rank are an error. The inputs' world_size is kept.
void merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace ddp::trace
