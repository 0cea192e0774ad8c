// ft_membership.h - the records of per-step fault tolerance (docs/fault-tolerance.md) as they live in the
// store: which workers make up the job at each membership epoch, the heartbeat each worker writes, and the
// keys they live under. Only ddprun's coordinator (ft_coordinator.h) writes memberships; workers
// (ft_client.h) write heartbeats and read memberships. Plain values and text, tested alone.
//
//   ft/hb/<slot>        "<incarnation> <beat> <committed step>"   a worker, every heartbeat period
//   ft/epoch            "<e>"                                     the coordinator: the newest epoch
//   ft/members/<e>      Membership::encode()                      the coordinator, once per epoch
//   ft/exit/<slot>.<i>  "<what ended it>"                         ddprun of another node: its worker ended
//   ft/admit/<slot>.<i> "admitted" | "gave-up"                    the coordinator or the replacement, once
//   ft/finished         "<e>"                                     the coordinator: every member of e finished
//
// A slot is a launch position (the RANK ddprun gave the first process of it); an incarnation counts the
// processes that held it (0 the first, +1 per replacement). A worker's rank in the group of epoch e is its
// slot's index among the epoch's members, in slot order.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp::dist::ft {

struct Member {
  int slot = 0;
  int incarnation = 0;
  bool operator==(const Member& o) const { return slot == o.slot && incarnation == o.incarnation; }
};

struct Membership {
  int64_t epoch = 0;
  std::vector<Member> members;  // sorted by slot
  // The job cannot go on (fewer than --min-ranks members, or the coordinator stopped it): every worker stops
  // with `reason`.
  bool failed = false;
  // What changed, for the logs: "rank 2 lost (no heartbeat for 2.0 s)"; "rank 2 joined (incarnation 1)".
  std::string reason;
  // The committed step the coordinator last saw from the members when it decided (for the log line).
  int64_t step = 0;

  std::string encode() const;
  static Membership decode(const std::string& text);  // throws ddp::Error naming what is malformed
  // The rank of `slot` in this epoch's group, or -1 when it is not a member.
  int rank_of(int slot) const;
  std::optional<Member> member_of(int slot) const;
  int size() const { return static_cast<int>(members.size()); }
  // "0,1,3"
  std::string slot_list() const;
};

struct Heartbeat {
  int incarnation = 0;
  int64_t beat = 0;            // increases with each heartbeat of this incarnation; kFinished: training ended
  static constexpr int64_t kFinished = -1;
  int64_t committed_step = 0;  // the worker's last committed optimizer step
  std::string encode() const;
  static std::optional<Heartbeat> decode(const std::string& text);  // nullopt when malformed
};

inline std::string heartbeat_key(int slot) { return "ft/hb/" + std::to_string(slot); }
inline std::string members_key(int64_t epoch) { return "ft/members/" + std::to_string(epoch); }
inline const char* kEpochKey = "ft/epoch";
// Set once by the coordinator to the epoch whose every member has finished training: then (and only then) the
// members leave. Deciding it in the coordinator, which also decides joins, means a join and the end never
// cross: a rank that finished keeps taking part in recoveries until this key names its epoch.
inline const char* kFinishedKey = "ft/finished";
inline std::string exit_key(int slot, int incarnation) {
  return "ft/exit/" + std::to_string(slot) + "." + std::to_string(incarnation);
}
// A replacement's admission, decided once by compare_set: "admitted" (the coordinator let it in) or "gave-up"
// (it saw the job finishing first and left). Whoever sets it first wins, so a replacement never leaves after
// being let in, and is never let in after leaving.
inline std::string admit_key(int slot, int incarnation) {
  return "ft/admit/" + std::to_string(slot) + "." + std::to_string(incarnation);
}
inline const char* kAdmitted = "admitted";
inline const char* kGaveUp = "gave-up";

// How long the members of a new epoch wait for each other before giving up: at least 30 s and 10 heartbeat
// deadlines, and longer than the old group's collective timeout. A member can be held inside an aborted
// collective until that timeout: the Gloo of Debian 12 (2022-05 snapshot) fails the operations pending on a
// pair when it is aborted, but not an unbound-buffer send already queued on it (a ring all-reduce's send to a
// peer that stopped reading), whose waiter sleeps to the operation's own timeout; the others must still be
// waiting when it gets out (seen once in FaultTolerance.Campaign, trial 46: rank 1 arrived after 60 s, the
// others had given up at 30 s).
inline std::chrono::milliseconds member_arrival_wait(std::chrono::milliseconds heartbeat_deadline,
                                                     std::chrono::milliseconds collective_timeout) {
  return std::max({std::chrono::milliseconds(30000), 10 * heartbeat_deadline,
                   collective_timeout + std::chrono::milliseconds(10000)});
}

// The store name of the process group of epoch e (ProcessGroupOptions::name): each epoch's group has keys
// of its own, so an aborted group's leftovers never meet the next one's.
inline std::string group_name_of_epoch(int64_t epoch) { return "ft/e" + std::to_string(epoch); }

}  // namespace ddp::dist::ft
