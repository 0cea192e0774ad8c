// test_device_guard.cpp - the device guard (runtime/core/device_guard.h) over a fake device API that counts
// its calls: the caller's device is current again after a scope on another device (also when it throws, also
// nested), no set() when the device is already current, and the allocator's step (on_device) leaves the
// caller's device current - before the fix it called cudaSetDevice and never restored it.
#include <gtest/gtest.h>

#include <stdexcept>

#include "runtime/core/device_guard.h"

using namespace ddp;

namespace {
struct FakeDevices {
  static inline int current = 0;
  static inline int sets = 0;
  static inline int restores = 0;
  static int get() { return current; }
  static void set(int d) {
    if (d < 0 || d >= 4) throw std::runtime_error("no such device");
    ++sets;
    current = d;
  }
  static void restore(int d) noexcept {
    ++restores;
    current = d;
  }
  static void reset(int d) {
    current = d;
    sets = restores = 0;
  }
};
using Guard = BasicDeviceGuard<FakeDevices>;
}  // namespace

TEST(DeviceGuard, RestoresTheCallersDeviceAndSetsNothingWhenAlreadyCurrent) {
  FakeDevices::reset(2);
  {
    Guard g(1);
    EXPECT_EQ(FakeDevices::current, 1);
  }
  EXPECT_EQ(FakeDevices::current, 2);
  EXPECT_EQ(FakeDevices::sets, 1);
  EXPECT_EQ(FakeDevices::restores, 1);
  FakeDevices::reset(3);
  { Guard g(3); }
  EXPECT_EQ(FakeDevices::sets + FakeDevices::restores, 0) << "the device was already current";
}

TEST(DeviceGuard, NestedAndThrowingScopesUnwindToEachCallersDevice) {
  FakeDevices::reset(0);
  try {
    Guard a(1);
    {
      Guard b(2);
      EXPECT_EQ(FakeDevices::current, 2);
    }
    EXPECT_EQ(FakeDevices::current, 1);
    Guard c(3);
    throw std::runtime_error("kernel failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(FakeDevices::current, 0);
  EXPECT_THROW(Guard bad(7), std::runtime_error);  // a failed set leaves the device as it was
  EXPECT_EQ(FakeDevices::current, 0);
}

TEST(DeviceGuard, TheAllocatorStepLeavesTheCallersDeviceCurrent) {
  for (int caller = 0; caller < 4; ++caller) {
    for (int target = 0; target < 4; ++target) {
      FakeDevices::reset(caller);
      int seen = -1;
      const int r = on_device<FakeDevices>(target, [&] {
        seen = FakeDevices::current;
        return 42;
      });
      EXPECT_EQ(r, 42);
      EXPECT_EQ(seen, target) << "the allocation ran on another device";
      EXPECT_EQ(FakeDevices::current, caller)
          << "an allocation on cuda:" << target << " left cuda:" << FakeDevices::current
          << " current for a caller on cuda:" << caller;
    }
  }
  FakeDevices::reset(1);
  EXPECT_THROW(on_device<FakeDevices>(2, []() -> int { throw std::runtime_error("out of memory"); }),
               std::runtime_error);
  EXPECT_EQ(FakeDevices::current, 1);
}
