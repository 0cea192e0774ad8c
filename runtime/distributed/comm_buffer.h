// comm_buffer.h - the one thing the communication layer moves: a typed, flat, contiguous buffer on a device.
// The groups know nothing of tensors or autograd (a Tensor's CommBuffer: tensor_comm_buffer.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"

namespace ddp::dist {

struct CommBuffer {
  void* data = nullptr;
  int64_t numel = 0;
  DType dtype = DType::F32;
  Device device = Device::cpu();
  // Keeps the memory alive until the Work that uses it completes (the process group holds a copy).
  std::shared_ptr<void> keepalive;
  // CUDA memory freed in stream order (a Storage of the CUDA allocator): notes that a stream (cudaStream_t)
  // uses it, so its free waits for that stream. A GPU group then need not hold `keepalive` until the
  // collective completes (stream_ordered_release.h). Null for any other memory.
  std::function<void(void* stream)> record_stream = nullptr;

  size_t nbytes() const { return static_cast<size_t>(numel) * dtype_size(dtype); }
};

// A CommBuffer over caller-owned memory (no keepalive): the caller keeps it alive until Work::wait().
template <class T>
CommBuffer comm_buffer(T* data, int64_t numel, Device device = Device::cpu()) {
  return CommBuffer{data, numel, dtype_of<T>::value, device, nullptr};
}

}  // namespace ddp::dist
