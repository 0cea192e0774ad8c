// host_staging.cpp - pinned host buffers (pooled), one side stream per device, and the events that order the
// caller's stream -> D2H -> host collective -> H2D -> caller's stream for Gloo collectives on CUDA buffers.
#include "runtime/distributed/cuda/host_staging.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/log.h"
#include "runtime/distributed/deferred_release.h"
#include "runtime/distributed/staging_plan.h"

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

DeferredRelease& parked_stagings() {
  static DeferredRelease* d = new DeferredRelease();  // never destroyed, like the pinned pool
  return *d;
}

}  // namespace

struct HostStaging::State {
  int device = 0;
  CommBuffer in, out;       // keepalives of the caller's buffers
  StagingPlan plan;         // block sizes and copies (staging_plan.h)
  void* host_in = nullptr;  // pinned blocks from the pool
  void* host_out = nullptr;
  cudaEvent_t issued = nullptr;  // recorded on the caller's stream at issue
  cudaEvent_t done = nullptr;    // recorded on the side stream after the H2D copy
  bool done_recorded = false;

  // True once the side stream's work on these buffers is over (or was never queued). Non-blocking.
  bool copies_finished() const {
    if (!done_recorded) return true;  // copy_in() synchronised its D2H copy; no H2D copy was queued
    DeviceGuard dg(device);
    cudaError_t q = cudaEventQuery(done);
    if (q == cudaErrorNotReady) return false;
    if (q != cudaSuccess) DDP_LOG(Error, "gloo staging: the H2D copy failed: ", cudaGetErrorString(q));
    return true;
  }
  ~State() {
    {
      DeviceGuard dg(device);
      if (issued) cudaEventDestroy(issued);
      if (done) cudaEventDestroy(done);
    }
    if (host_out != host_in) pinned_pool().give(host_out);
    pinned_pool().give(host_in);
    // in/out (the caller's tensors) are released after this body, i.e. after the copy finished.
  }
};

HostStaging::HostStaging(CollectiveKind kind, int world, const CommBuffer& in, const CommBuffer& out)
    : st_(std::make_shared<State>()) {
  DDP_CHECK(in.device.is_cuda() && in.device == out.device, "gloo staging: buffers on ", in.device.str(),
            " and ", out.device.str(), ": expected both on the same CUDA device");
  parked_stagings().drain();  // release earlier stagings whose copies have finished since
  State& s = *st_;
  s.in = in;
  s.out = out;
  s.plan = plan_staging(kind, world, in, out);
  s.device = in.device.index;
  DeviceGuard dg(s.device);
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&s.issued, cudaEventDisableTiming));
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  DDP_CUDA_CHECK(cudaEventRecord(s.issued, ddp::cuda::current_stream()));
  s.host_in = pinned_pool().take(s.plan.in_block_bytes);
  s.host_out = s.plan.out_shares_in_block ? s.host_in : pinned_pool().take(s.plan.out_block_bytes);
}

HostStaging::~HostStaging() {
  if (!st_) return;
  if (st_->copies_finished()) return;  // st_ (and the caller's buffers) released now
  std::shared_ptr<State> st = st_;
  parked_stagings().add([st] { return st->copies_finished(); }, st);
}

size_t HostStaging::parked() { return parked_stagings().drain(); }

void* HostStaging::host_in() const { return st_->host_in; }
void* HostStaging::host_out() const { return st_->host_out; }

void HostStaging::copy_in() {
  State& st = *st_;
  DeviceGuard dg(st.device);
  cudaStream_t s = side_stream(st.device);
  DDP_CUDA_CHECK(cudaStreamWaitEvent(s, st.issued, 0));
  if (st.plan.copy_in_bytes > 0)
    DDP_CUDA_CHECK(cudaMemcpyAsync(st.host_in, st.in.data, st.plan.copy_in_bytes, cudaMemcpyDeviceToHost, s));
  DDP_CUDA_CHECK(cudaStreamSynchronize(s));
}

void HostStaging::copy_out() {
  State& st = *st_;
  DeviceGuard dg(st.device);
  cudaStream_t s = side_stream(st.device);
  if (st.plan.copy_out_bytes > 0)
    DDP_CUDA_CHECK(
        cudaMemcpyAsync(st.out.data, st.host_out, st.plan.copy_out_bytes, cudaMemcpyHostToDevice, s));
  DDP_CUDA_CHECK(cudaEventRecord(st.done, s));
  st.done_recorded = true;
  parked_stagings().drain();
}

void HostStaging::join_current_stream() {
  State& st = *st_;
  if (!st.done_recorded) return;
  DeviceGuard dg(st.device);
  DDP_CUDA_CHECK(cudaStreamWaitEvent(ddp::cuda::current_stream(), st.done, 0));
}

}  // namespace ddp::dist::cuda
