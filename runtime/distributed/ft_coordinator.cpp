// ft_coordinator.cpp - membership decisions from heartbeats and process ends (see ft_coordinator.h).
#include "runtime/distributed/ft_coordinator.h"

#include <algorithm>
#include <cstdio>

#include "runtime/core/error.h"

namespace ddp::dist::ft {

namespace {
std::string seconds_text(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", std::chrono::duration<double>(d).count());
  return buf;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}
}  // namespace

Coordinator::Coordinator(std::shared_ptr<Store> store, CoordinatorOptions options)
    : store_(std::move(store)), opt_(options), slots_(static_cast<size_t>(options.slots)) {
  DDP_CHECK(store_ != nullptr, "fault tolerance: the coordinator needs a store");
  DDP_CHECK(opt_.slots >= 1, "fault tolerance: the coordinator needs at least one slot, got ", opt_.slots);
  DDP_CHECK(opt_.min_ranks >= 1 && opt_.min_ranks <= opt_.slots, "--min-ranks ", opt_.min_ranks,
            " must be between 1 and the world size ", opt_.slots);
  DDP_CHECK(opt_.deadline.count() > 0, "--heartbeat-timeout must be positive");
}

void Coordinator::start(Clock::time_point now) {
  started_ = now;
  Membership m;
  m.epoch = 0;
  for (int s = 0; s < opt_.slots; ++s) {
    m.members.push_back({s, 0});
    slots_[static_cast<size_t>(s)].incarnation = 0;
    slots_[static_cast<size_t>(s)].moved = now;
  }
  m.reason = "start: world " + std::to_string(opt_.slots);
  publish(std::move(m));
}

void Coordinator::worker_ended(int slot, int incarnation, bool failed, const std::string& what) {
  if (slot < 0 || slot >= opt_.slots || !failed) return;
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (incarnation > s.ended_incarnation) {
    s.ended_incarnation = incarnation;
    s.ended_what = what;
  }
}

std::optional<Membership> Coordinator::tick(Clock::time_point now) {
  removed_last_.clear();
  if (current_.failed) return std::nullopt;
  // Heartbeats, and the exit reports of other nodes' ddprun for the current members.
  for (int slot = 0; slot < opt_.slots; ++slot) {
    Slot& s = slots_[static_cast<size_t>(slot)];
    if (auto text = store_->try_get(heartbeat_key(slot))) {
      if (auto hb = Heartbeat::decode(*text)) {
        if (hb->incarnation > s.incarnation || (hb->incarnation == s.incarnation && hb->beat != s.beat)) {
          if (hb->incarnation > s.incarnation) s.seen = false;
          s.incarnation = hb->incarnation;
          s.beat = hb->beat;
          s.moved = now;
          s.seen = true;
        }
        if (current_.rank_of(slot) >= 0) newest_step_ = std::max(newest_step_, hb->committed_step);
      }
    }
    if (auto m = current_.member_of(slot); m && m->incarnation > s.ended_incarnation) {
      if (auto what = store_->try_get(exit_key(slot, m->incarnation))) worker_ended(slot, m->incarnation, true, *what);
    }
  }

  std::vector<Member> keep, lost, joined;
  std::vector<std::string> why;
  for (const Member& m : current_.members) {
    Slot& s = slots_[static_cast<size_t>(m.slot)];
    std::string reason;
    if (s.ended_incarnation >= m.incarnation) {
      reason = s.ended_what;
    } else if (s.incarnation > m.incarnation && s.seen) {
      reason = "replaced by incarnation " + std::to_string(s.incarnation);
    } else if (s.incarnation == m.incarnation && s.beat != Heartbeat::kFinished) {
      const auto limit = s.seen ? opt_.deadline : opt_.first_beat_timeout;
      if (now - s.moved > limit)
        reason = (s.seen ? "no heartbeat for " : "no first heartbeat for ") + seconds_text(now - s.moved) + " s";
    }
    if (reason.empty()) {
      keep.push_back(m);
    } else {
      s.lost_incarnation = std::max(s.lost_incarnation, m.incarnation);
      lost.push_back(m);
      why.push_back("rank " + std::to_string(m.slot) + " lost (" + reason + ")");
    }
  }
  // Once a member finished training the job is ending: nobody joins any more (a late replacement stops).
  bool finishing = false;
  for (const Member& m : current_.members) finishing |= slots_[static_cast<size_t>(m.slot)].beat == Heartbeat::kFinished;
  for (int slot = 0; slot < opt_.slots && !finishing; ++slot) {
    Slot& s = slots_[static_cast<size_t>(slot)];
    const bool member_now =
        std::any_of(keep.begin(), keep.end(), [&](const Member& m) { return m.slot == slot; });
    // Only a newer incarnation joins: one that was removed (a silent heartbeat, a cut link) stays out even if
    // it beats again - its ddprun kills it, or it stops itself when it sees it is no member.
    if (member_now || !s.seen || s.ended_incarnation >= s.incarnation || s.lost_incarnation >= s.incarnation ||
        now - s.moved > opt_.deadline)
      continue;
    const auto was = current_.member_of(slot);
    if (was && was->incarnation >= s.incarnation) continue;  // the lost incarnation's own last beats
    // A replacement that already gave up (the job was finishing) is not let in.
    if (store_->compare_set(admit_key(slot, s.incarnation), "", kAdmitted) != kAdmitted) continue;
    joined.push_back({slot, s.incarnation});
    why.push_back("rank " + std::to_string(slot) + " joined (incarnation " + std::to_string(s.incarnation) + ")");
  }
  if (lost.empty() && joined.empty()) {
    bool all_finished = !current_.members.empty();
    for (const Member& m : current_.members) {
      const Slot& s = slots_[static_cast<size_t>(m.slot)];
      all_finished = all_finished && s.incarnation == m.incarnation && s.beat == Heartbeat::kFinished;
    }
    if (all_finished && !finished_published_) {
      store_->set(kFinishedKey, std::to_string(current_.epoch));
      finished_published_ = true;
    }
    return std::nullopt;
  }

  Membership next;
  next.epoch = current_.epoch + 1;
  next.members = keep;
  next.members.insert(next.members.end(), joined.begin(), joined.end());
  std::sort(next.members.begin(), next.members.end(), [](const Member& a, const Member& b) { return a.slot < b.slot; });
  next.step = newest_step_;
  next.reason = join(why, "; ") + "; world " + std::to_string(current_.size()) + " -> " +
                std::to_string(next.size());
  if (next.size() < opt_.min_ranks) {
    std::vector<std::string> gone;
    for (int slot = 0; slot < opt_.slots; ++slot)
      if (next.rank_of(slot) < 0) gone.push_back(std::to_string(slot));
    next.failed = true;
    next.reason += "; below --min-ranks " + std::to_string(opt_.min_ranks) + " (ranks lost: " + join(gone, ", ") +
                   "): the job stops";
  }
  removed_last_ = lost;
  publish(next);
  return current_;
}

void Coordinator::publish(Membership m) {
  store_->set(members_key(m.epoch), m.encode());
  store_->set(kEpochKey, std::to_string(m.epoch));
  current_ = std::move(m);
}

}  // namespace ddp::dist::ft
