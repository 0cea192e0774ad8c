// bucket_assignment.h - which parameters share a gradient bucket. Pure arithmetic, no tensors: the reducer
// feeds it the parameters in the order their gradients are expected (reverse registration order at first,
// the measured ready order after the first iteration) and gets back the buckets in launch order. It lives in
// runtime/sim, below runtime/ddp (tools/check_layers.py), so that the bucket simulator packs exactly as the
// reducer does without including the reducer's folder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"

namespace ddp {

struct BucketParamInfo {
  size_t nbytes = 0;
  DType dtype = DType::F32;
  Device device;
};

// Walks `order` (indices into params) and packs parameters into buckets, one open bucket per (device, dtype):
// a bucket closes as soon as its size reaches its cap; the first bucket closed on each (device, dtype) is
// capped at first_cap_bytes, the rest at cap_bytes. Buckets are returned in the order they closed (leftovers
// last), so bucket 0 holds the gradients that become ready first.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParamInfo>& params,
                                                const std::vector<size_t>& order, size_t first_cap_bytes,
                                                size_t cap_bytes);

}  // namespace ddp
