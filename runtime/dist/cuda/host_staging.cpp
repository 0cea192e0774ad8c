// host_staging.cpp - pinned host buffers (pooled), one side stream per device, and the events that order the
// caller's stream -> D2H -> host collective -> H2D -> caller's stream for Gloo collectives on CUDA buffers.
#include "runtime/dist/cuda/host_staging.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/log.h"

namespace ddp::dist::cuda {

namespace {
using ddp::cuda::DeviceGuard;

// Pinned host blocks reused across collectives (cudaHostAlloc is slow); smallest fitting block first.
class PinnedPool {
 public:
  void* take(size_t bytes) {
    if (bytes == 0) bytes = 1;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = free_.lower_bound(bytes);
      if (it != free_.end()) {
        void* p = it->second;
        sizes_[p] = it->first;
        free_.erase(it);
        return p;
      }
    }
    void* p = nullptr;
    DDP_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
    std::lock_guard<std::mutex> g(mu_);
    sizes_[p] = bytes;
    return p;
  }
  void give(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> g(mu_);
    free_.emplace(sizes_.at(p), p);
    sizes_.erase(p);
  }

 private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::map<void*, size_t> sizes_;  // blocks in use
};

PinnedPool& pinned_pool() {
  static PinnedPool* pool = new PinnedPool();  // never destroyed: blocks may be returned during exit
  return *pool;
}

cudaStream_t side_stream(int device) {
  static std::mutex mu;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> g(mu);
  if (static_cast<int>(streams.size()) <= device) streams.resize(device + 1, nullptr);
  if (!streams[device]) {
    DeviceGuard dg(device);
    DDP_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
  }
  return streams[device];
}

}  // namespace

struct HostStaging::Events {
  int device = 0;
  cudaEvent_t issued = nullptr;  // recorded on the caller's stream at issue
  cudaEvent_t done = nullptr;    // recorded on the side stream after the H2D copy
  bool done_recorded = false;
};

HostStaging::HostStaging(const CommBuffer& in, const CommBuffer& out)
    : in_(in), out_(out), events_(std::make_unique<Events>()) {
  DDP_CHECK(in.device.is_cuda() && in.device == out.device, "gloo staging: buffers on ", in.device.str(),
            " and ", out.device.str(), ": expected both on the same CUDA device");
  events_->device = in.device.index;
  DeviceGuard dg(events_->device);
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&events_->issued, cudaEventDisableTiming));
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&events_->done, cudaEventDisableTiming));
  DDP_CUDA_CHECK(cudaEventRecord(events_->issued, ddp::cuda::current_stream()));
  host_in_ = pinned_pool().take(in_.nbytes());
  host_out_ = in_.data == out_.data ? host_in_ : pinned_pool().take(out_.nbytes());
}

HostStaging::~HostStaging() {
  {
    DeviceGuard dg(events_->device);
    if (events_->done_recorded) {
      cudaError_t err = cudaEventSynchronize(events_->done);
      if (err != cudaSuccess)
        DDP_LOG(Error, "gloo staging: waiting for the H2D copy failed: ", cudaGetErrorString(err));
    }
    if (events_->issued) cudaEventDestroy(events_->issued);
    if (events_->done) cudaEventDestroy(events_->done);
  }
  if (host_out_ != host_in_) pinned_pool().give(host_out_);
  pinned_pool().give(host_in_);
}

void HostStaging::copy_in() {
  DeviceGuard dg(events_->device);
  cudaStream_t s = side_stream(events_->device);
  DDP_CUDA_CHECK(cudaStreamWaitEvent(s, events_->issued, 0));
  if (in_.nbytes() > 0)
    DDP_CUDA_CHECK(cudaMemcpyAsync(host_in_, in_.data, in_.nbytes(), cudaMemcpyDeviceToHost, s));
  DDP_CUDA_CHECK(cudaStreamSynchronize(s));
}

void HostStaging::copy_out() {
  DeviceGuard dg(events_->device);
  cudaStream_t s = side_stream(events_->device);
  if (out_.nbytes() > 0)
    DDP_CUDA_CHECK(cudaMemcpyAsync(out_.data, host_out_, out_.nbytes(), cudaMemcpyHostToDevice, s));
  DDP_CUDA_CHECK(cudaEventRecord(events_->done, s));
  events_->done_recorded = true;
}

void HostStaging::join_current_stream() {
  if (!events_->done_recorded) return;
  DeviceGuard dg(events_->device);
  DDP_CUDA_CHECK(cudaStreamWaitEvent(ddp::cuda::current_stream(), events_->done, 0));
}

}  // namespace ddp::dist::cuda
