// storage.cpp - the device-independent parts of Storage; CPU memory comes from the caching allocator
// (cpu_allocator.h).
#include "runtime/tensor/storage.h"

#include <cstdlib>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/tensor/cpu_allocator.h"

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
    s->data_ = cpu_allocate(nbytes);
  }
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device,
                                       std::function<void()> release) {
  DDP_CHECK(release != nullptr, "Storage::wrap: no release function for the external memory");
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->release_ = std::move(release);
  return s;
}

Storage::~Storage() {
  if (release_) {
    try {
      release_();
    } catch (...) {
      // a destructor must not throw
    }
    return;
  }
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
    cpu_free(data_, nbytes_);
  }
}

void Storage::record_stream(void* stream) {
  if (stream == alloc_stream_) return;
  std::lock_guard<std::mutex> g(streams_mu_);
  for (void* s : used_on_streams_)
    if (s == stream) return;
  used_on_streams_.push_back(stream);
}

}  // namespace ddp
