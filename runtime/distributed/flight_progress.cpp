// flight_progress.cpp - mapping the progress page on both sides, and the rank's counters.
#include "runtime/distributed/flight_progress.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/core/error.h"
#include "runtime/core/log.h"

namespace ddp::dist {

namespace {
std::atomic<FlightProgressPage*> g_page{nullptr};
std::mutex g_attach_mu;
std::string g_attached_path;

FlightProgressPage* map_page(const std::string& path, bool create, std::string* why) {
  int fd = ::open(path.c_str(), create ? (O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC) : (O_RDWR | O_CLOEXEC), 0600);
  if (fd < 0) {
    *why = std::strerror(errno);
    return nullptr;
  }
  if (create && ::ftruncate(fd, sizeof(FlightProgressPage)) != 0) {
    *why = std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, sizeof(FlightProgressPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    *why = std::strerror(e);
    return nullptr;
  }
  return static_cast<FlightProgressPage*>(p);  // a zero-filled page is a valid (unattached) state
}
}  // namespace

FlightProgressPage* flight_progress_page() { return g_page.load(std::memory_order_acquire); }

void flight_progress_attach(const std::string& path) {
  std::lock_guard<std::mutex> g(g_attach_mu);
  if (path == g_attached_path) return;
  std::string why;
  FlightProgressPage* page = map_page(path, false, &why);
  if (page == nullptr) {
    DDP_LOG(Warn, "flight recorder: cannot map the progress page '", path, "' (DDP_FLIGHT_PROGRESS_FILE): ", why,
            "; the launcher's stall watchdog will not see this rank");
    return;
  }
  page->pid.store(::getpid(), std::memory_order_relaxed);
  page->magic.store(kFlightProgressMagic, std::memory_order_release);
  // The old page stays mapped: a recorder may be writing to it this instant (a test's second attach).
  g_page.store(page, std::memory_order_release);
  g_attached_path = path;
}

void flight_progress_attach_from_env() {
  const char* v = std::getenv("DDP_FLIGHT_PROGRESS_FILE");
  if (v != nullptr && *v != '\0') flight_progress_attach(v);
}

void flight_progress_issued(int64_t now_ns) {
  if (FlightProgressPage* p = flight_progress_page()) {
    p->issued.fetch_add(1, std::memory_order_relaxed);
    p->last_change_ns.store(now_ns, std::memory_order_relaxed);
  }
}
void flight_progress_changed(int64_t now_ns) {
  if (FlightProgressPage* p = flight_progress_page()) p->last_change_ns.store(now_ns, std::memory_order_relaxed);
}
void flight_progress_ended(int64_t now_ns) {
  if (FlightProgressPage* p = flight_progress_page()) {
    p->ended.fetch_add(1, std::memory_order_relaxed);
    p->last_change_ns.store(now_ns, std::memory_order_relaxed);
  }
}

void flight_progress_dumped() {
  if (FlightProgressPage* p = flight_progress_page()) p->dumps.fetch_add(1, std::memory_order_release);
}

FlightProgressWatch::FlightProgressWatch(std::string path) : path_(std::move(path)) {
  std::string why;
  page_ = map_page(path_, true, &why);
  DDP_CHECK(page_ != nullptr, "ddprun: cannot create the progress page '", path_, "' for the stall watchdog: ", why,
            "; check that the flight directory is writable (--flight-dir)");
}

FlightProgressWatch::~FlightProgressWatch() {
  if (page_) ::munmap(page_, sizeof(FlightProgressPage));
}

FlightProgressWatch::Snapshot FlightProgressWatch::read() const {
  Snapshot s;
  s.attached = page_->magic.load(std::memory_order_acquire) == kFlightProgressMagic;
  s.pid = page_->pid.load(std::memory_order_relaxed);
  s.ended = page_->ended.load(std::memory_order_relaxed);  // may pass `issued` in a torn read: pending() is 0 then
  s.issued = page_->issued.load(std::memory_order_relaxed);
  s.last_change_ns = page_->last_change_ns.load(std::memory_order_relaxed);
  s.dumps = page_->dumps.load(std::memory_order_acquire);
  return s;
}

void FlightProgressWatch::reset() {
  page_->magic.store(0, std::memory_order_relaxed);
  page_->pid.store(0, std::memory_order_relaxed);
  page_->issued.store(0, std::memory_order_relaxed);
  page_->ended.store(0, std::memory_order_relaxed);
  page_->last_change_ns.store(0, std::memory_order_relaxed);
  page_->dumps.store(0, std::memory_order_relaxed);
}

}  // namespace ddp::dist
