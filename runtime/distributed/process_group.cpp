// process_group.cpp - the host side of Work (a completion flag and an error behind a condition variable),
// the option defaults read from the environment, and the group's store prefix (group_name).
#include "runtime/distributed/process_group.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/distributed/store.h"

namespace ddp::dist {

Work::~Work() = default;
ProcessGroup::~ProcessGroup() = default;

void Work::finish(std::exception_ptr err) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (done_) return;
    done_ = true;
    finished_at_ = std::chrono::steady_clock::now();
    error_ = std::move(err);
  }
  cv_.notify_all();
}

std::chrono::steady_clock::time_point Work::finished_at() {
  std::lock_guard<std::mutex> g(mu_);
  return finished_at_;
}

bool Work::host_done() {
  std::lock_guard<std::mutex> g(mu_);
  return done_;
}

bool Work::is_completed() { return host_done(); }

std::exception_ptr Work::error() {
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

void Work::wait() {
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return done_; });
    err = error_;
  }
  if (err) std::rethrow_exception(err);
  on_completed_wait();
}

bool Work::wait_for(std::chrono::milliseconds timeout) {
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> g(mu_);
    if (!cv_.wait_for(g, timeout, [&] { return done_; })) return false;
    err = error_;
  }
  if (err) std::rethrow_exception(err);
  on_completed_wait();
  return true;
}

namespace {
thread_local std::chrono::milliseconds t_collective_timeout{0};
}  // namespace

ScopedCollectiveTimeout::ScopedCollectiveTimeout(std::chrono::milliseconds timeout)
    : previous_(t_collective_timeout) {
  DDP_CHECK(timeout.count() > 0, "a collective's timeout must be positive, got ", timeout.count(), " ms");
  t_collective_timeout = timeout;
}

ScopedCollectiveTimeout::~ScopedCollectiveTimeout() { t_collective_timeout = previous_; }

std::chrono::milliseconds ScopedCollectiveTimeout::current() { return t_collective_timeout; }

std::chrono::milliseconds ProcessGroupOptions::default_collective_timeout() {
  const char* v = std::getenv("DDP_COLLECTIVE_TIMEOUT_S");
  if (!v || !*v) return std::chrono::minutes(10);
  double seconds = 0;
  auto [p, ec] = std::from_chars(v, v + std::strlen(v), seconds);
  DDP_CHECK(ec == std::errc() && p == v + std::strlen(v) && seconds > 0 && seconds <= 7 * 24 * 3600.0,
            "DDP_COLLECTIVE_TIMEOUT_S='", v,
            "' is not valid: expected a positive number of seconds (at most a week)");
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

bool ProcessGroupOptions::debug_collectives_from_env() {
  const char* v = std::getenv("DDP_DEBUG_COLLECTIVES");
  if (!v || !*v || std::strcmp(v, "0") == 0) return false;
  DDP_CHECK(std::strcmp(v, "1") == 0, "DDP_DEBUG_COLLECTIVES='", v, "' is not valid: expected 0 or 1");
  return true;
}

std::string group_name(const ProcessGroupOptions& options, Store& store) {
  return options.name.empty() ? "pg" + std::to_string(store.next_group_id()) : options.name;
}

}  // namespace ddp::dist
