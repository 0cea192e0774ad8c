// trace.cpp - recording side of the tracer: per-thread append-only event buffers, the global tracer,
// iteration markers and TraceScope. Writing JSON and merging files live in chrome_trace.cpp.
//
// Buffer design: each thread that records into a tracer owns one ThreadBuffer, a chain of fixed-size chunks
// it appends to without a lock. A slot is filled first, then `published` is bumped with release order; a
// reader (events(), any thread) loads `published` with acquire order and reads only slots below it, walking
// chunk links that were stored (release) before any slot of the new chunk was published. Chunks never move,
// so readers and the single writer of a buffer never touch the same slot at the same time.
#include "runtime/trace/trace.h"

#include <algorithm>

#include "runtime/core/error.h"

namespace ddp::trace {

namespace detail {

std::atomic<bool> g_tracing_enabled{false};

constexpr size_t kEventsPerChunk = 1024;

struct Chunk {
  std::array<Event, kEventsPerChunk> events;
  std::atomic<Chunk*> next{nullptr};
};

struct ThreadBuffer {
  ThreadBuffer() : head(new Chunk), tail(head) {}
  ~ThreadBuffer() {
    for (Chunk* c = head; c != nullptr;) {
      Chunk* next = c->next.load(std::memory_order_relaxed);
      delete c;
      c = next;
    }
  }
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;

  // Owner thread only.
  Event& next_slot() {
    if (tail_used == kEventsPerChunk) {
      Chunk* fresh = new Chunk;
      tail->next.store(fresh, std::memory_order_release);
      tail = fresh;
      tail_used = 0;
    }
    return tail->events[tail_used++];
  }
  void publish() {
    published.store(published.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  // Any thread: calls f on every published event at or after the clear mark.
  template <class F>
  void for_each_published(F&& f) const {
    const size_t n = published.load(std::memory_order_acquire);
    const size_t from = cleared_before.load(std::memory_order_acquire);
    const Chunk* c = head;
    for (size_t i = 0; i < n; ++i) {
      if (i > 0 && i % kEventsPerChunk == 0) c = c->next.load(std::memory_order_acquire);
      if (i >= from) f(c->events[i % kEventsPerChunk]);
    }
  }

  Chunk* const head;
  Chunk* tail;           // owner thread only
  size_t tail_used = 0;  // owner thread only
  std::atomic<size_t> published{0};
  std::atomic<size_t> cleared_before{0};
};

}  // namespace detail

namespace {

std::atomic<uint64_t> g_next_tracer_id{1};

// The buffer this thread used last, and for which tracer (ids are never reused, so a stale entry for a
// destroyed tracer is never followed).
struct ThreadCache {
  uint64_t tracer_id = 0;
  detail::ThreadBuffer* buffer = nullptr;
};
thread_local ThreadCache t_cache;

int64_t unix_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Tracer::Tracer() : Tracer(false) {}

Tracer::Tracer(bool is_global)
    : id_(g_next_tracer_id.fetch_add(1)),
      is_global_(is_global),
      start_(std::chrono::steady_clock::now()),
      start_unix_us_(unix_now_us()) {
  lane_names_ = {{kIterationLane, "iterations"}, {kComputeLane, "compute"}, {kCommLane, "comm"}};
}

Tracer::~Tracer() = default;

Tracer& global_tracer() {
  static Tracer* tracer = new Tracer(true);  // leaked on purpose: threads may still record during exit
  return *tracer;
}

void Tracer::set_enabled(bool on) {
  enabled_.store(on, std::memory_order_relaxed);
  if (is_global_) detail::g_tracing_enabled.store(on, std::memory_order_relaxed);
}

Lane Tracer::add_lane(const std::string& name) {
  DDP_CHECK(!name.empty(), "Tracer::add_lane: give the lane a name (it labels the track in the viewer)");
  std::lock_guard<std::mutex> lock(mutex_);
  Lane lane = std::max<Lane>(16, lane_names_.rbegin()->first + 1);
  DDP_CHECK(lane < kExtraTrackTidStride, "Tracer::add_lane: at most ", kExtraTrackTidStride - 16,
            " named lanes per tracer ('", name, "' would be one more)");
  lane_names_[lane] = name;
  return lane;
}

detail::ThreadBuffer& Tracer::local_buffer() {
  if (t_cache.tracer_id == id_) [[likely]]
    return *t_cache.buffer;
  return register_thread();
}

detail::ThreadBuffer& Tracer::register_thread() {
  std::lock_guard<std::mutex> lock(mutex_);
  // A thread id can be reused after its thread exits; reusing that buffer keeps one writer per buffer.
  auto [it, inserted] = buffer_of_thread_.try_emplace(std::this_thread::get_id(), nullptr);
  if (inserted) {
    buffers_.push_back(std::make_unique<detail::ThreadBuffer>());
    it->second = buffers_.back().get();
  }
  t_cache = {id_, it->second};
  return *it->second;
}

void Tracer::set_clock_sync(const ClockSync& sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  clock_sync_ = sync;
  has_clock_sync_ = true;
}

bool Tracer::has_clock_sync() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return has_clock_sync_;
}

ClockSync Tracer::clock_sync() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return clock_sync_;
}

void Tracer::record(std::string_view name, const char* category, Lane lane, char phase, int64_t ts_ns,
                    int64_t dur_ns, const Arg* args, size_t num_args, const TextArg* text, size_t num_text) {
  if (!enabled()) return;
  detail::ThreadBuffer& buffer = local_buffer();
  Event& e = buffer.next_slot();
  e.name.assign(name.data(), name.size());
  e.category = category ? category : "";
  e.ts_ns = ts_ns;
  e.dur_ns = dur_ns;
  e.lane = lane;
  e.phase = phase;
  e.num_args = static_cast<uint8_t>(std::min<size_t>(num_args, kMaxArgs));
  for (size_t i = 0; i < e.num_args; ++i) e.args[i] = args[i];
  e.num_text_args = static_cast<uint8_t>(std::min<size_t>(text ? num_text : 0, kMaxTextArgs));
  for (size_t i = 0; i < e.num_text_args; ++i) {
    e.text_args[i].key = text[i].key;
    e.text_args[i].value.assign(text[i].value);
  }
  buffer.publish();
}

void Tracer::complete(std::string_view name, const char* category, Lane lane, int64_t begin_ns,
                      int64_t end_ns, std::initializer_list<Arg> args) {
  if (!enabled()) return;
  DDP_CHECK(args.size() <= kMaxArgs, "trace event '", name, "': ", args.size(), " arguments, at most ",
            kMaxArgs, " are kept; drop some");
  DDP_CHECK(end_ns >= begin_ns, "trace event '", name, "': end ", end_ns, " ns is before begin ", begin_ns,
            " ns; pass times from the same clock (Tracer::to_trace_ns)");
  record(name, category, lane, 'X', begin_ns, end_ns - begin_ns, args.begin(), args.size());
}

void Tracer::complete(std::string_view name, const char* category, Lane lane, int64_t begin_ns,
                      int64_t end_ns, std::initializer_list<Arg> args, std::initializer_list<TextArg> text_args) {
  if (!enabled()) return;
  DDP_CHECK(args.size() <= kMaxArgs && text_args.size() <= kMaxTextArgs, "trace event '", name, "': ",
            args.size(), " arguments and ", text_args.size(), " text arguments, at most ", kMaxArgs, " and ",
            kMaxTextArgs, " are kept; drop some");
  DDP_CHECK(end_ns >= begin_ns, "trace event '", name, "': end ", end_ns, " ns is before begin ", begin_ns,
            " ns; pass times from the same clock (Tracer::to_trace_ns)");
  record(name, category, lane, 'X', begin_ns, end_ns - begin_ns, args.begin(), args.size(), text_args.begin(),
         text_args.size());
}

void Tracer::instant(std::string_view name, const char* category, Lane lane,
                     std::initializer_list<Arg> args) {
  if (!enabled()) return;
  DDP_CHECK(args.size() <= kMaxArgs, "trace event '", name, "': ", args.size(), " arguments, at most ",
            kMaxArgs, " are kept; drop some");
  record(name, category, lane, 'i', now_ns(), 0, args.begin(), args.size());
}

void Tracer::begin_iteration(int64_t iteration) {
  if (!enabled()) {
    iteration_begin_ns_.store(-1, std::memory_order_relaxed);
    return;
  }
  open_iteration_.store(iteration, std::memory_order_relaxed);
  iteration_begin_ns_.store(now_ns(), std::memory_order_relaxed);
}

void Tracer::end_iteration(int64_t iteration) {
  int64_t begin = iteration_begin_ns_.exchange(-1, std::memory_order_relaxed);
  if (begin < 0) return;  // begun while tracing was off
  int64_t open = open_iteration_.load(std::memory_order_relaxed);
  DDP_CHECK(open == iteration, "Tracer::end_iteration(", iteration, ") but the open iteration is ", open,
            "; call begin_iteration/end_iteration in pairs with the same index");
  complete("iteration " + std::to_string(iteration), "iteration", kIterationLane, begin, now_ns(),
           {{"iteration", iteration}});
}

std::vector<Event> Tracer::events() const {
  std::vector<Event> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& b : buffers_) b->for_each_published([&](const Event& e) { out.push_back(e); });
  }
  std::stable_sort(out.begin(), out.end(), [](const Event& a, const Event& b) { return a.ts_ns < b.ts_ns; });
  return out;
}

void Tracer::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& b : buffers_)
    b->cleared_before.store(b->published.load(std::memory_order_acquire), std::memory_order_release);
}

void TraceScope::start(const char* category, std::string_view name, Lane lane) {
  active_ = true;
  category_ = category;
  lane_ = lane;
  name_.assign(name.data(), name.size());
  begin_ns_ = global_tracer().now_ns();
}

void TraceScope::finish() {
  Tracer& t = global_tracer();
  int64_t end = t.now_ns();
  t.record(name_, category_, lane_, 'X', begin_ns_, end - begin_ns_, args_.data(), num_args_);
}

}  // namespace ddp::trace
