// tensor_dataset.cpp - row gathering: one memcpy per sample and tensor.
#include "runtime/data/tensor_dataset.h"

#include <cstring>

#include "runtime/core/error.h"

namespace ddp::data {
namespace {

// Copies rows `indices` of src (N, ...) into a new (B, ...) tensor from `memory`.
Tensor gather_rows(const Tensor& src, std::span<const int64_t> indices, BatchMemory& memory) {
  Shape shape = src.shape();
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = memory.empty(shape, src.dtype());
  const size_t row_bytes = src.size(0) == 0 ? 0 : src.nbytes() / static_cast<size_t>(src.size(0));
  const char* from = static_cast<const char*>(src.raw_data());
  char* to = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < indices.size(); ++i)
    std::memcpy(to + i * row_bytes, from + static_cast<size_t>(indices[i]) * row_bytes, row_bytes);
  return out;
}

}  // namespace

TensorDataset::TensorDataset(Tensor x, Tensor y) : x_(std::move(x)), y_(std::move(y)) {
  DDP_CHECK(x_.defined() && y_.defined(), "TensorDataset: x and y must both be defined tensors");
  DDP_CHECK(x_.dim() >= 1 && y_.dim() >= 1, "TensorDataset: x ", shape_str(x_.shape()), " and y ",
            shape_str(y_.shape()), " need a first dimension (the sample index)");
  DDP_CHECK(x_.size(0) == y_.size(0), "TensorDataset: x has ", x_.size(0), " samples but y has ", y_.size(0),
            "; both first dimensions must be the sample count");
  DDP_CHECK(x_.device().is_cpu() && y_.device().is_cpu(), "TensorDataset: x (", x_.device().str(),
            ") and y (", y_.device().str(),
            ") must be CPU tensors; the DataLoader moves batches to the device");
}

DatasetBatch TensorDataset::get_batch(std::span<const int64_t> indices, BatchMemory& memory) const {
  check_indices(indices, "TensorDataset::get_batch");
  return {gather_rows(x_, indices, memory), gather_rows(y_, indices, memory)};
}

}  // namespace ddp::data
