// device_guard.h - makes a device current for one scope and gives the caller its own device back after it
// (also when the scope throws), over a device API of three static functions:
//   int get();                  the thread's current device (throws on failure)
//   void set(int);              makes a device current (throws on failure)
//   void restore(int) noexcept; the same from a destructor: failures are left to the next checked call
// The CUDA one is ddp::cuda::DeviceGuard (core/cuda/stream.h); the CPU tests use a fake
// (tests/core/test_device_guard.cpp). It never sets a device that is already current, and it must never
// leave a device other than the caller's current behind: the allocator runs inside the caller's code.
#pragma once
#include <utility>

namespace ddp {

template <class Api>
class BasicDeviceGuard {
 public:
  explicit BasicDeviceGuard(int device) : prev_(Api::get()) {
    if (prev_ != device) {
      Api::set(device);
      changed_ = true;
    }
  }
  ~BasicDeviceGuard() {
    if (changed_) Api::restore(prev_);
  }
  BasicDeviceGuard(const BasicDeviceGuard&) = delete;
  BasicDeviceGuard& operator=(const BasicDeviceGuard&) = delete;

 private:
  int prev_;
  bool changed_ = false;
};

// Runs f() with `device` current and the caller's device current again afterwards (the allocator's step).
template <class Api, class F>
decltype(auto) on_device(int device, F&& f) {
  BasicDeviceGuard<Api> guard(device);
  return std::forward<F>(f)();
}

}  // namespace ddp
