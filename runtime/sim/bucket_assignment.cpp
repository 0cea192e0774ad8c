// bucket_assignment.cpp - greedy packing of parameters into size-capped buckets per (device, dtype).
#include "runtime/sim/bucket_assignment.h"

#include <map>
#include <tuple>

namespace ddp {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParamInfo>& params,
                                                const std::vector<size_t>& order, size_t first_cap_bytes,
                                                size_t cap_bytes) {
  struct Open {
    std::vector<size_t> members;
    size_t bytes = 0;
    bool closed_one = false;
  };
  using Key = std::tuple<int, int, int>;
  std::map<Key, Open> open;
  std::vector<Key> key_order;  // first appearance, so leftovers come out deterministically
  std::vector<std::vector<size_t>> buckets;
  for (size_t idx : order) {
    const auto& p = params[idx];
    Key k{static_cast<int>(p.device.kind), p.device.index, static_cast<int>(p.dtype)};
    auto [it, inserted] = open.try_emplace(k);
    if (inserted) key_order.push_back(k);
    Open& o = it->second;
    o.members.push_back(idx);
    o.bytes += p.nbytes;
    const size_t cap = o.closed_one ? cap_bytes : first_cap_bytes;
    if (o.bytes >= cap) {
      buckets.push_back(std::move(o.members));
      o.members.clear();
      o.bytes = 0;
      o.closed_one = true;
    }
  }
  for (const Key& k : key_order)
    if (!open[k].members.empty()) buckets.push_back(std::move(open[k].members));
  return buckets;
}

}  // namespace ddp
