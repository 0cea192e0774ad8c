// batch_transfer.cpp - the CUDA copy stream and the hand-over; CPU builds compile only the no-op paths.
#include "runtime/data/batch_transfer.h"

#include "runtime/core/error.h"

#ifdef DDP_WITH_CUDA
#include <mutex>
#include <vector>

#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"
#endif

namespace ddp::data {

#ifdef DDP_WITH_CUDA
namespace {
cudaStream_t copy_stream(int device) {
  static std::mutex mu;
  static std::vector<cudaStream_t> streams;  // never destroyed: device blocks keep their allocation stream
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(streams.size()) <= device) streams.resize(static_cast<size_t>(device) + 1, nullptr);
  if (!streams[static_cast<size_t>(device)]) streams[static_cast<size_t>(device)] = cuda::new_stream();
  return streams[static_cast<size_t>(device)];
}
}  // namespace
#endif

Tensor transfer_to_device(const Tensor& host, Device device) {
  if (device.is_cpu()) return host;
#ifdef DDP_WITH_CUDA
  cuda::DeviceGuard on_device(device.index);  // the caller's device is current again on return
  cudaStream_t s = copy_stream(device.index);
  cuda::StreamGuard guard(s);
  Tensor out = host.to(device);
  DDP_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
#else
  DDP_FAIL("DataLoader: device ", device.str(),
           " needs CUDA, but ddp.cpp was built without it; use the cpu device");
#endif
}

void hand_over_to_current_stream(const Tensor& t) {
  if (!t.defined() || t.device().is_cpu() || !t.storage()) return;
#ifdef DDP_WITH_CUDA
  cuda::DeviceGuard on_device(t.device().index);
  t.storage()->record_stream(cuda::current_stream());
#endif
}

}  // namespace ddp::data
