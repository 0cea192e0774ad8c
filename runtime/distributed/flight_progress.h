// flight_progress.h - one page of shared memory per rank through which a launcher watches whether the rank's
// collectives make progress: the rank's flight recorders count the collectives they issued and ended and stamp
// the newest transition; ddprun's stall watchdog (runtime/launch/stall_watchdog.h) maps the same file and sees a
// rank that has waited on a collective with no transition for longer than its limit. The launcher names the file
// in DDP_FLIGHT_PROGRESS_FILE; without it nothing is mapped and nothing is counted.
//
// The page is a few lock-free 64-bit atomics (address-free, so valid across processes); the recorder's updates
// are relaxed increments and stores, no system call.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace ddp::dist {

inline constexpr uint64_t kFlightProgressMagic = 0x64647066'6c696768ULL;  // "ddpfligh"

struct FlightProgressPage {
  std::atomic<uint64_t> magic;           // kFlightProgressMagic once a rank attached (it answers SIGUSR1)
  std::atomic<int64_t> pid;              // the attached process
  std::atomic<uint64_t> issued;          // collectives issued, all groups of the process
  std::atomic<uint64_t> ended;           // collectives completed or failed
  std::atomic<int64_t> last_change_ns;   // steady clock (CLOCK_MONOTONIC) of the newest issue/start/end
  std::atomic<uint64_t> dumps;           // SIGUSR1 requests answered: every group's record written (or none
                                         // to write: the recorder off), counted after the last file
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "the progress page needs address-free atomics");

// Rank side. The page this process counts into, or nullptr. attach maps `path` (created by the launcher,
// sizeof(FlightProgressPage) bytes) and marks it; a second attach to another path replaces the first (tests).
// Failing to map is logged, not thrown: a job must not die for its watchdog.
FlightProgressPage* flight_progress_page();
void flight_progress_attach(const std::string& path);
// DDP_FLIGHT_PROGRESS_FILE, when set and not attached yet (called when a recorder is made).
void flight_progress_attach_from_env();

// Counting (no-ops without a page).
void flight_progress_issued(int64_t now_ns);
void flight_progress_changed(int64_t now_ns);
void flight_progress_ended(int64_t now_ns);
// One SIGUSR1 request answered: every recorder of the process has written its file (the launcher waits for
// this count to pass the one it saw when it asked, not for any one file: a process may hold several groups).
void flight_progress_dumped();

// Launcher side: creates (truncates) the file and maps it read-write; the snapshot reads it.
class FlightProgressWatch {
 public:
  explicit FlightProgressWatch(std::string path);  // throws ddp::Error naming the path
  ~FlightProgressWatch();
  FlightProgressWatch(const FlightProgressWatch&) = delete;
  FlightProgressWatch& operator=(const FlightProgressWatch&) = delete;

  struct Snapshot {
    bool attached = false;  // a ddp.cpp process counts into it
    int64_t pid = 0;
    uint64_t issued = 0, ended = 0;
    int64_t last_change_ns = 0;
    uint64_t dumps = 0;  // SIGUSR1 requests answered
    uint64_t pending() const { return issued > ended ? issued - ended : 0; }
  };
  Snapshot read() const;
  // Zeroes the page (a restarted worker starts from nothing).
  void reset();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FlightProgressPage* page_ = nullptr;
};

}  // namespace ddp::dist
