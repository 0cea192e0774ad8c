// dataset.cpp - the parts of the Dataset interface shared by every dataset: the
// pageable-memory overload and the index check.
#include "runtime/data/dataset.h"

#include "runtime/core/error.h"

namespace ddp::data {

DatasetBatch Dataset::get_batch(std::span<const int64_t> indices) const {
  BatchMemory pageable(/*pinned=*/false);
  return get_batch(indices, pageable);
}

void Dataset::check_indices(std::span<const int64_t> indices, const char* what) const {
  const int64_t n = size();
  for (size_t i = 0; i < indices.size(); ++i)
    DDP_CHECK(indices[i] >= 0 && indices[i] < n, what, ": sample index ", indices[i], " (position ", i,
              " of the batch) is outside [0, ", n,
              "); indices must come from a sampler built for this dataset's size");
}

}  // namespace ddp::data
