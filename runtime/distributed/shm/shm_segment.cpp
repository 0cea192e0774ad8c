// shm_segment.cpp - shm_open/ftruncate/mmap of one segment, unlinking, and the stale-segment sweep.
#include "runtime/distributed/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "runtime/core/error.h"
#include "runtime/distributed/shm/shm_sync.h"

namespace ddp::dist::shm {

namespace {
std::string errno_text() { return std::strerror(errno); }

void* map_fd(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    std::string why = errno_text();
    ::close(fd);
    DDP_FAIL("shm: mmap of segment ", name, " (", bytes, " bytes) failed: ", why);
  }
  ::close(fd);
  return p;
}
}  // namespace

Segment Segment::create(const std::string& name, size_t bytes, bool reserve) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  DDP_CHECK(fd >= 0, "shm: cannot create shared-memory segment ", name, ": ", errno_text(),
            ". Is /dev/shm mounted and writable? Use --backend gloo (or DDP_SHM=0) to avoid shared memory");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::string why = errno_text();
    ::close(fd);
    ::shm_unlink(name.c_str());
    DDP_FAIL("shm: cannot size segment ", name, " to ", bytes, " bytes: ", why,
             ". /dev/shm may be too small (df -h /dev/shm); lower DDP_SHM_CHUNK_BYTES or use --backend gloo");
  }
  if (reserve && bytes > 0) {
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err != 0) {
      ::close(fd);
      ::shm_unlink(name.c_str());
      DDP_FAIL("shm: cannot reserve ", bytes, " bytes for segment ", name, ": ", std::strerror(err),
               ". /dev/shm is too small (df -h /dev/shm; a container's default is 64 MiB: --shm-size)");
    }
  }
  Segment s;
  try {
    s.data_ = map_fd(fd, bytes, name);
  } catch (...) {
    ::shm_unlink(name.c_str());
    throw;
  }
  s.size_ = bytes;
  s.name_ = name;
  s.owner_ = true;
  return s;
}

Segment Segment::open(const std::string& name) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  DDP_CHECK(fd >= 0, "shm: cannot open the segment ", name, " of a peer rank: ", errno_text(),
            ". The ranks of a shared-memory group must share /dev/shm (same host, same IPC namespace)");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string why = errno_text();
    ::close(fd);
    DDP_FAIL("shm: fstat of segment ", name, " failed: ", why);
  }
  Segment s;
  s.size_ = static_cast<size_t>(st.st_size);
  s.data_ = map_fd(fd, s.size_, name);
  s.name_ = name;
  return s;
}

Segment::~Segment() { reset(); }

Segment::Segment(Segment&& o) noexcept { *this = std::move(o); }

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    name_ = std::move(o.name_);
    owner_ = o.owner_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.owner_ = false;
  }
  return *this;
}

void Segment::unlink() {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
}

void Segment::reset() {
  unlink();
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

std::string pid_namespace_id() {
  char buf[128];
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  if (n <= 0) return "0";
  std::string s(buf, static_cast<size_t>(n));  // "pid:[4026531836]"
  const size_t a = s.find('['), b = s.find(']');
  return a != std::string::npos && b != std::string::npos && b > a + 1 ? s.substr(a + 1, b - a - 1) : "0";
}

std::string segment_prefix_of(pid_t pid) {
  return std::string(kSegmentPrefix) + pid_namespace_id() + "." + std::to_string(pid) + ".";
}

std::string segment_name(const std::string& run_id, const std::string& rest) {
  return "/" + segment_prefix_of(::getpid()) + run_id + "." + rest;
}

std::string random_run_id() {
  std::random_device rd;
  std::string hex;
  for (int i = 0; i < 16; ++i) hex += "0123456789abcdef"[rd() % 16];
  return hex;
}

std::vector<std::string> list_segments(const std::string& shm_dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(shm_dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(kSegmentPrefix, 0) == 0) out.push_back(n);
  }
  ::closedir(d);
  return out;
}

std::vector<std::string> list_segments_of(const std::vector<pid_t>& pids, const std::string& shm_dir) {
  std::vector<std::string> out;
  for (const auto& n : list_segments(shm_dir))
    for (pid_t p : pids)
      if (n.rfind(segment_prefix_of(p), 0) == 0) out.push_back(n);
  return out;
}

namespace {
// Unlinks our namespace's segments whose creator pid is accepted by `wanted` and not `alive`.
template <class Wanted, class Alive>
std::vector<std::string> remove_dead_segments(const std::string& shm_dir, Wanted wanted, Alive alive) {
  std::vector<std::string> removed;
  const std::string ours = std::string(kSegmentPrefix) + pid_namespace_id() + ".";
  for (const std::string& n : list_segments(shm_dir)) {
    if (n.rfind(ours, 0) != 0) continue;  // another pid namespace: its pids mean nothing here
    const size_t dot = n.find('.', ours.size());
    if (dot == std::string::npos) continue;
    long pid = 0;
    try {
      pid = std::stol(n.substr(ours.size(), dot - ours.size()));
    } catch (...) {
      continue;
    }
    if (!wanted(static_cast<pid_t>(pid)) || alive(static_cast<pid_t>(pid))) continue;
    if (::shm_unlink(("/" + n).c_str()) == 0) removed.push_back(n);
  }
  return removed;
}
}  // namespace

std::vector<std::string> remove_stale_segments(const std::string& shm_dir) {
  // A zombie's segments are its parent's to remove (ddprun does, before it reaps): sweeping them from here
  // raced with it, and the parent then reported fewer than its workers left.
  return remove_dead_segments(
      shm_dir, [](pid_t) { return true; }, pid_exists);
}

std::vector<std::string> remove_segments_of(const std::vector<pid_t>& pids, const std::string& shm_dir) {
  return remove_dead_segments(
      shm_dir, [&](pid_t p) { return std::find(pids.begin(), pids.end(), p) != pids.end(); }, pid_alive);
}

}  // namespace ddp::dist::shm
