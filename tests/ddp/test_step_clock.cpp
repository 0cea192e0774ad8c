// test_step_clock.cpp - the reducer's statistics clock on its host fallback (CPU parameters, or no CUDA):
// marks are seconds since the base mark, in order, host time stamps map onto the same axis, and start()
// resets. The device clock (CUDA timing events) runs in tools/gpu_check.sh through the reducer's statistics.
#include <gtest/gtest.h>

#include <thread>

#include "runtime/core/error.h"
#include "runtime/ddp/step_clock.h"

using ddp::StepClock;
using namespace std::chrono;

TEST(StepClock, HostFallbackMarksAreSecondsSinceTheBaseInOrder) {
  StepClock c;
  c.start(ddp::Device::cpu());
  EXPECT_FALSE(c.on_device());
  const auto base = c.now();
  std::this_thread::sleep_for(milliseconds(20));
  const auto later = c.now();
  const auto host = c.at_host_time(steady_clock::now() + milliseconds(100));
  const auto ext = c.external_event(nullptr);  // no event on the host clock: a plain "now"
  EXPECT_GE(c.seconds(base), 0.0);
  EXPECT_GE(c.seconds(later) - c.seconds(base), 0.019);
  EXPECT_GT(c.seconds(host), c.seconds(later) + 0.09);
  EXPECT_GE(c.seconds(ext), c.seconds(later));
  EXPECT_EQ(c.seconds(0), 0.0) << "mark 0 is the base";
}

TEST(StepClock, StartDropsEarlierMarks) {
  StepClock c;
  c.start(ddp::Device::cpu());
  c.now();
  c.now();
  c.start(ddp::Device::cpu());
  EXPECT_THROW(c.seconds(2), ddp::Error);
  EXPECT_EQ(c.seconds(0), 0.0);
}
