// storage.cpp - CPU allocation and the device-independent parts of Storage.
#include "runtime/tensor/storage.h"

#include <cstdlib>
#include <cstring>

#include "runtime/core/error.h"

namespace ddp {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device, bool pinned) {
  std::shared_ptr<Storage> s(new Storage());
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->pinned_ = pinned && device.is_cpu();
  if (nbytes == 0) return s;
  if (device.is_cuda()) {
    s->data_ = detail::cuda_allocate(nbytes, device.index, &s->alloc_stream_);
  } else if (s->pinned_) {
    s->data_ = detail::pinned_allocate(nbytes);
  } else {
    size_t rounded = (nbytes + 63) / 64 * 64;
    s->data_ = std::aligned_alloc(64, rounded);
    DDP_CHECK(s->data_ != nullptr, "out of host memory allocating ", nbytes, " bytes");
  }
  return s;
}

Storage::~Storage() {
  if (!data_) return;
  if (device_.is_cuda()) {
    try {
      detail::cuda_free(data_, device_.index, alloc_stream_, used_on_streams_);
    } catch (...) {
      // a destructor must not throw; the CUDA context is going away or broken
    }
  } else if (pinned_) {
    detail::pinned_free(data_);
  } else {
    std::free(data_);
  }
}

void Storage::record_stream(void* stream) {
  if (stream == alloc_stream_) return;
  for (void* s : used_on_streams_)
    if (s == stream) return;
  used_on_streams_.push_back(stream);
}

}  // namespace ddp
