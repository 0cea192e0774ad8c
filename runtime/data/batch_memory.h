// batch_memory.h - host memory for assembling batches. For a GPU-bound loader it is pinned (page-locked), so
// the host-to-device copy can run asynchronously, and it is recycled: a block is handed out again once no
// tensor refers to it any more, because allocating pinned memory (cudaMallocHost) costs far more than a copy.
// Pageable memory is never cached (malloc is cheap and the CPU loader hands its batches to the caller).
//
// One BatchMemory belongs to one thread (the loader's prefetch thread); it is not itself thread-safe.
#pragma once
#include <memory>
#include <vector>

#include "runtime/tensor/storage.h"
#include "runtime/tensor/tensor.h"

namespace ddp::data {

class BatchMemory {
 public:
  explicit BatchMemory(bool pinned, size_t max_cached_blocks = 8);
  // An uninitialised contiguous host tensor.
  Tensor empty(const Shape& shape, DType dtype);
  bool pinned() const { return pinned_; }
  // Blocks currently held for reuse (for tests).
  size_t cached_blocks() const { return cache_.size(); }

 private:
  bool pinned_;
  size_t max_cached_;
  std::vector<std::shared_ptr<Storage>> cache_;
};

}  // namespace ddp::data
