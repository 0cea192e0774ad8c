// test_trace_ready_times.cpp - gradient-ready times read back from trace events.
#include <gtest/gtest.h>

#include "runtime/core/error.h"
#include "runtime/sim/trace_ready_times.h"

namespace ddp::sim {
namespace {

trace::TraceEvent ev(const std::string& name, const std::string& cat, char phase, double ts, double dur = 0) {
  trace::TraceEvent e;
  e.name = name;
  e.category = cat;
  e.phase = phase;
  e.ts_us = ts;
  e.dur_us = dur;
  return e;
}

// Two iterations: backward starts at 100 / 1100 us; "b" is ready 10 / 30 us later, "a" 50 / 70 us later.
trace::LoadedTrace two_iterations() {
  trace::LoadedTrace t;
  for (int it = 0; it < 2; ++it) {
    const double base = 1000.0 * it;
    t.events.push_back(ev("iteration " + std::to_string(it), "iteration", 'X', base, 900));
    t.events.push_back(ev("backward", "backward", 'X', base + 100, 80 + 20 * it));
    t.events.push_back(ev("ready b", "ddp", 'i', base + 110 + 20 * it));
    t.events.push_back(ev("ready a", "ddp", 'i', base + 150 + 20 * it));
  }
  return t;
}

TEST(TraceReadyTimes, MediansRelativeToBackwardStart) {
  auto m = ready_times_from_trace(two_iterations(), {"a", "b"}, 0);
  EXPECT_EQ(m.iterations, 2u);
  ASSERT_EQ(m.ready_s.size(), 2u);
  EXPECT_NEAR(m.ready_s[0], 60e-6, 1e-12);  // median of 50 and 70 us
  EXPECT_NEAR(m.ready_s[1], 20e-6, 1e-12);
  EXPECT_NEAR(m.backward_s, 90e-6, 1e-12);
}

TEST(TraceReadyTimes, MissingParameterOrRankIsAnError) {
  EXPECT_THROW(ready_times_from_trace(two_iterations(), {"a", "c"}, 0), Error);
  EXPECT_THROW(ready_times_from_trace(two_iterations(), {"a"}, 1), Error);
  try {
    ready_times_from_trace(two_iterations(), {"a", "zz"}, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ready zz"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddp::sim
