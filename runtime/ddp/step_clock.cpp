// step_clock.cpp - host time stamps or CUDA timing events behind one interface (see step_clock.h).
#include "runtime/ddp/step_clock.h"

#include "runtime/core/error.h"
#ifdef DDP_WITH_CUDA
#include "runtime/core/cuda/timing_event.h"
#endif

namespace ddp {

StepClock::~StepClock() { clear(); }

void StepClock::clear() {
#ifdef DDP_WITH_CUDA
  for (auto& p : points_)
    if (p.owned) cuda::destroy_event(p.event);
#endif
  points_.clear();
}

void StepClock::start(Device device) {
  clear();
  device_ = false;
#ifdef DDP_WITH_CUDA
  device_ = device.is_cuda();
#else
  (void)device;
#endif
  now();
  base_host_ = points_[0].host;  // on a device clock the base event's host-side twin (for at_host_time)
}

StepClock::Mark StepClock::now() {
  Point p;
  p.host = std::chrono::steady_clock::now();
  p.has_host = true;
#ifdef DDP_WITH_CUDA
  if (device_) {
    p.event = cuda::record_timing_event();
    p.owned = true;
    p.has_host = false;
  }
#endif
  points_.push_back(p);
  return points_.size() - 1;
}

StepClock::Mark StepClock::at_host_time(std::chrono::steady_clock::time_point t) {
  Point p;
  p.host = t;
  p.has_host = true;
  points_.push_back(p);
  return points_.size() - 1;
}

StepClock::Mark StepClock::external_event(void* cuda_event) {
  if (!device_ || cuda_event == nullptr) return now();
  Point p;
  p.event = cuda_event;
  points_.push_back(p);
  return points_.size() - 1;
}

double StepClock::seconds(Mark m) {
  DDP_CHECK(m < points_.size() && !points_.empty(), "StepClock: mark ", m, " of ", points_.size(),
            " (marks are dropped by start())");
  const Point& p = points_[m];
  if (p.has_host) return std::chrono::duration<double>(p.host - base_host_).count();
#ifdef DDP_WITH_CUDA
  return cuda::elapsed_seconds(points_[0].event, p.event);
#else
  return 0;
#endif
}

}  // namespace ddp
