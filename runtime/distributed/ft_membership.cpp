// ft_membership.cpp - text forms of the fault-tolerance records (see ft_membership.h).
#include "runtime/distributed/ft_membership.h"

#include <algorithm>
#include <sstream>

#include "runtime/core/error.h"

namespace ddp::dist::ft {

// "<epoch> <ok|failed> <step> <slot>.<inc>,<slot>.<inc>,...|<reason>" (an empty member list is "-").
std::string Membership::encode() const {
  std::string s = std::to_string(epoch) + (failed ? " failed " : " ok ") + std::to_string(step) + " ";
  if (members.empty()) s += "-";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(members[i].slot)).push_back('.');
    s.append(std::to_string(members[i].incarnation));
  }
  return s + "|" + reason;
}

Membership Membership::decode(const std::string& text) {
  Membership m;
  const size_t bar = text.find('|');
  DDP_CHECK(bar != std::string::npos, "fault tolerance: malformed membership record '", text,
            "' (no '|'); the store holds another program's key ft/members/*");
  m.reason = text.substr(bar + 1);
  std::istringstream in(text.substr(0, bar));
  std::string state, list;
  in >> m.epoch >> state >> m.step >> list;
  DDP_CHECK(!in.fail() && (state == "ok" || state == "failed"), "fault tolerance: malformed membership record '",
            text, "'");
  m.failed = state == "failed";
  if (list != "-") {
    std::istringstream items(list);
    std::string item;
    while (std::getline(items, item, ',')) {
      const size_t dot = item.find('.');
      DDP_CHECK(dot != std::string::npos, "fault tolerance: malformed member '", item, "' in '", text, "'");
      m.members.push_back({std::stoi(item.substr(0, dot)), std::stoi(item.substr(dot + 1))});
    }
  }
  std::sort(m.members.begin(), m.members.end(), [](const Member& a, const Member& b) { return a.slot < b.slot; });
  return m;
}

int Membership::rank_of(int slot) const {
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].slot == slot) return static_cast<int>(i);
  return -1;
}

std::optional<Member> Membership::member_of(int slot) const {
  const int r = rank_of(slot);
  if (r < 0) return std::nullopt;
  return members[static_cast<size_t>(r)];
}

std::string Membership::slot_list() const {
  std::string s;
  for (size_t i = 0; i < members.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(members[i].slot));
  }
  return s;
}

std::string Heartbeat::encode() const {
  return std::to_string(incarnation) + " " + std::to_string(beat) + " " + std::to_string(committed_step);
}

std::optional<Heartbeat> Heartbeat::decode(const std::string& text) {
  std::istringstream in(text);
  Heartbeat h;
  in >> h.incarnation >> h.beat >> h.committed_step;
  if (in.fail()) return std::nullopt;
  return h;
}

}  // namespace ddp::dist::ft
