// join_announcements.h - ZeRO-3 under Join: the codes the ranks still training announce on the gather group
// before each collective they issue there (sharded_join.cpp serves them on a joined rank). Internal to
// runtime/ddp/sharded.
#pragma once
#include <cstdint>
#include <string>

namespace ddp::zero3_join {

// ZeRO-3 under Join: what the ranks still training announce on the gather group before each collective
// they issue there (an all-reduce of one int64, Max: a joined rank contributes kNobody).
constexpr int64_t kNobody = 0;         // every rank has joined
constexpr int64_t kNextIteration = 1;  // a synchronized forward: its activity exchange (main group) follows
constexpr int64_t kBackwardDone = 2;   // its backward issued its last gather: the reduce-scatters follow
constexpr int64_t kUnitOrder = 3;      // the unit-order agreement (a broadcast) follows
constexpr int64_t kStep = 4;           // an optimizer step: its Join exchange (main group) follows
constexpr int64_t kGatherBase = 5;     // kGatherBase + 2 unit + exact: that unit's all-gather follows

inline std::string announcement_name(int64_t code) {
  switch (code) {
    case kNobody:
      return "nothing (every rank has joined)";
    case kNextIteration:
      return "the start of a synchronized forward";
    case kBackwardDone:
      return "the end of a synchronized backward";
    case kUnitOrder:
      return "the unit-order agreement";
    case kStep:
      return "an optimizer step";
    default:
      return "the all-gather of unit " + std::to_string((code - kGatherBase) / 2);
  }
}

}  // namespace ddp::zero3_join
