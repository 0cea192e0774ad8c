// batch_memory.cpp - pinned block recycling: reuse the smallest cached block that is free and big enough.
#include "runtime/data/batch_memory.h"

#include "runtime/core/error.h"

namespace ddp::data {

BatchMemory::BatchMemory(bool pinned, size_t max_cached_blocks)
    : pinned_(pinned), max_cached_(max_cached_blocks) {}

Tensor BatchMemory::empty(const Shape& shape, DType dtype) {
  if (!pinned_) return Tensor::empty(shape, dtype, Device::cpu());
  const int64_t numel = shape_numel(shape);
  DDP_CHECK(numel >= 0, "BatchMemory: bad shape ", shape_str(shape));
  const size_t nbytes = static_cast<size_t>(numel) * dtype_size(dtype);
  std::shared_ptr<Storage> block;
  for (auto& b : cache_) {  // use_count 1: only this cache refers to it, no tensor is using it
    if (b.use_count() == 1 && b->nbytes() >= nbytes && (!block || b->nbytes() < block->nbytes())) block = b;
  }
  if (!block) {
    block = Storage::allocate(nbytes, Device::cpu(), /*pinned=*/true);
    if (cache_.size() < max_cached_) cache_.push_back(block);
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(block);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace ddp::data
