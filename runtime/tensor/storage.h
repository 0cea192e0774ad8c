// storage.h - a ref-counted block of memory on one device; views of a tensor share it.
// CPU memory is 64-byte aligned and comes from the caching allocator (cpu_allocator.h); CUDA memory comes
// from the stream-ordered pool (cudaMallocAsync), never a cudaMalloc per op, and is freed on its stream after
// every stream that used it has caught up.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/core/device.h"

namespace ddp {

class Storage {
 public:
  // Allocates nbytes on device (uninitialised). pinned=true gives page-locked host memory (CUDA builds).
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device, bool pinned = false);
  // Memory someone else owns (e.g. a process group's shared-memory buffer): `release` runs once when the last
  // tensor over it is gone, instead of a free.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device,
                                       std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // CUDA: note that `stream` (a cudaStream_t) uses this memory, so freeing waits for it (like record_stream).
  // Thread-safe. The stream must outlive this storage (the streams of this runtime are never destroyed while
  // memory may still name them: the NCCL groups' comm streams are reused, not destroyed).
  void record_stream(void* stream);
  // True for CUDA memory of the stream-ordered allocator: its free honours record_stream. False for CPU
  // memory and for wrap()ped memory, whose release runs when the last user drops it.
  bool frees_in_stream_order() const { return device_.is_cuda() && data_ != nullptr && !release_; }
  void* alloc_stream() const { return alloc_stream_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
  void* alloc_stream_ = nullptr;
  std::mutex streams_mu_;  // guards used_on_streams_ (record_stream from several threads)
  std::vector<void*> used_on_streams_;
  std::function<void()> release_;  // wrap(): external memory
};

namespace detail {
// Device memory primitives; in a build without CUDA they raise a clear error.
void* cuda_allocate(size_t nbytes, int device, void** stream_out);
void cuda_free(void* p, int device, void* alloc_stream, const std::vector<void*>& used_on);
void* pinned_allocate(size_t nbytes);
void pinned_free(void* p);
// Copies nbytes between any two devices; async on the current stream when a GPU is involved
// (synchronous = true waits for completion, needed when the host reads the result).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes, bool synchronous);
void fill_bytes_zero(void* dst, Device dev, size_t nbytes);
// How many copy_bytes calls so far copied from a GPU into host memory, in this process (0 without CUDA): a
// test's probe that a path reads nothing back, e.g. gradient-norm clipping on the device.
int64_t device_to_host_copies();
}  // namespace detail

}  // namespace ddp
