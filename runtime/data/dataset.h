// dataset.h - what the DataLoader needs from a data set: its size, and one call that gathers a list of
// samples into one contiguous batch. TensorDataset (tensor_dataset.h) and TokenWindowDataset (text_dataset.h)
// are the two implementations; FashionMNIST and the synthetic generators produce TensorDatasets.
//
// A dataset never decides the order: which indices form a batch comes from the DistributedSampler inside the
// DataLoader. get_batch() is called from the loader's prefetch thread, so it must be safe to call from any
// thread while the dataset is not being modified (all datasets here are immutable after construction).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/data/batch_memory.h"
#include "runtime/tensor/tensor.h"

namespace ddp::data {

// Inputs and targets of a batch: x and y both have the batch as their first dimension.
struct DatasetBatch {
  Tensor x;
  Tensor y;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Number of samples; valid indices are 0 .. size()-1.
  virtual int64_t size() const = 0;
  // Gathers samples `indices` (in that order, repeats allowed) into x (B, ...) and y (B, ...) with
  // B = indices.size(), allocated from `memory` (host memory, pinned when the loader feeds a GPU).
  // An index outside [0, size()) is a ddp::Error.
  virtual DatasetBatch get_batch(std::span<const int64_t> indices, BatchMemory& memory) const = 0;
  // The same into ordinary (pageable) host memory.
  DatasetBatch get_batch(std::span<const int64_t> indices) const;

 protected:
  // Raises ddp::Error naming `what` when an index is outside [0, size()).
  void check_indices(std::span<const int64_t> indices, const char* what) const;
};

}  // namespace ddp::data
