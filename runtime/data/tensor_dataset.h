// tensor_dataset.h - a dataset held as two host tensors whose first dimension is the sample: x (N, ...) and
// y (N, ...). get_batch copies the chosen rows, in order, into one contiguous batch.
#pragma once
#include <memory>

#include "runtime/data/dataset.h"

namespace ddp::data {

class TensorDataset : public Dataset {
 public:
  // x and y: CPU tensors with at least one dimension and the same first dimension (the sample count).
  TensorDataset(Tensor x, Tensor y);

  int64_t size() const override { return x_.size(0); }
  DatasetBatch get_batch(std::span<const int64_t> indices, BatchMemory& memory) const override;
  using Dataset::get_batch;

  const Tensor& x() const { return x_; }
  const Tensor& y() const { return y_; }

 private:
  Tensor x_, y_;
};

}  // namespace ddp::data
