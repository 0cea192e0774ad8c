// shm_segment.h - one POSIX shared-memory segment (shm_open + mmap) of the shared-memory process group, and
// the naming that lets a later run remove what a killed one left in /dev/shm.
//
// Names are "/ddpshm.<pid namespace>.<creator pid>.<run id>.<rest>": the creator's pid tells whether the
// owner still lives, so remove_stale_segments() can unlink the segments of dead processes - only those of its
// own pid namespace, where the pid means something (a container sharing /dev/shm is left alone), and not
// those of a zombie; ddprun removes each worker's segments once it exited, before reaping it
// (remove_segments_of), so the two never race. The group unlinks its segment as soon
// as every peer mapped it (the memory lives on while mapped), so a crash after setup leaves nothing behind.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace ddp::dist::shm {

inline constexpr const char* kSegmentPrefix = "ddpshm.";

class Segment {
 public:
  Segment() = default;
  // Creates (exclusively) and maps a zero-filled segment of `bytes`. `reserve`: allocate every page now
  // (posix_fallocate), so a full /dev/shm is an error here rather than a SIGBUS at the first write.
  static Segment create(const std::string& name, size_t bytes, bool reserve = false);
  // Opens and maps an existing segment; its size is read from the file.
  static Segment open(const std::string& name);
  ~Segment();
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name from /dev/shm (idempotent; the mapping stays valid).
  void unlink();

 private:
  void reset();
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;  // created here: unlinked at the latest by the destructor
};

// "/ddpshm.<pid ns>.<pid>.<run_id>.<rest>" for this process.
std::string segment_name(const std::string& run_id, const std::string& rest);
// "ddpshm.<pid ns>.<pid>." : how the /dev/shm entries of process `pid` (of this pid namespace) begin.
std::string segment_prefix_of(pid_t pid);
// The inode number of this process's pid namespace ("0" when /proc does not tell).
std::string pid_namespace_id();
// A random hex id (16 characters) for one run of a group.
std::string random_run_id();

// Unlinks every /dev/shm/ddpshm.<our pid ns>.<pid>.* whose process no longer exists (a zombie still does: its
// parent may clean up after it); returns the names removed.
std::vector<std::string> remove_stale_segments(const std::string& shm_dir = "/dev/shm");
// Those of the given pids whose processes ended, zombies included (ddprun, for each worker that exited,
// before reaping it: what a killed worker left).
std::vector<std::string> remove_segments_of(const std::vector<pid_t>& pids,
                                            const std::string& shm_dir = "/dev/shm");
// Names (without the leading '/') of our segments in shm_dir, alive or not.
std::vector<std::string> list_segments(const std::string& shm_dir = "/dev/shm");
// Those of them that belong to one of `pids` (of this pid namespace).
std::vector<std::string> list_segments_of(const std::vector<pid_t>& pids,
                                          const std::string& shm_dir = "/dev/shm");

}  // namespace ddp::dist::shm
