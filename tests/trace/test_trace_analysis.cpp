// test_trace_analysis.cpp - the step statistics on synthetic traces whose answers are worked out by hand in
// the comments (times in microseconds).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/core/error.h"
#include "runtime/trace/trace.h"
#include "runtime/trace/trace_analysis.h"

using namespace ddp;
using namespace ddp::trace;

namespace {

constexpr int64_t us = 1000;  // Tracer times are nanoseconds

void fwd(Tracer& t, int64_t b, int64_t e) { t.complete("op", "forward", kComputeLane, b * us, e * us); }
void bwd(Tracer& t, int64_t b, int64_t e) { t.complete("op", "backward", kComputeLane, b * us, e * us); }
void comm(Tracer& t, int64_t bucket, int64_t bytes, int64_t b, int64_t e) {
  t.complete("allreduce bucket " + std::to_string(bucket), "comm", kCommLane, b * us, e * us,
             {{"bucket", bucket}, {"bytes", bytes}});
}
void iteration(Tracer& t, int64_t i, int64_t b, int64_t e) {
  t.complete("iteration " + std::to_string(i), "iteration", kIterationLane, b * us, e * us,
             {{"iteration", i}});
}

// Rank 0: a warm-up op outside any iteration, then three iterations of 100 us starting at 1000.
// Rank 1: one iteration without communication.
LoadedTrace synthetic_trace() {
  Tracer r0;
  r0.set_rank(0);
  r0.set_enabled(true);
  fwd(r0, 0, 500);  // warm-up: outside every iteration, must be ignored

  // Iteration 0 [1000, 1100): forward [1000,1010)+[1010,1020) with [1012,1015) nested -> 20.
  // backward [1020,1040)+[1040,1060) with [1045,1050) nested -> 40, last ends at 1060.
  // comm: bucket 0 [1030,1050) 1000 B, bucket 1 [1055,1080) 2000 B -> union 45; overlap with backward
  // [1030,1050) 20 + [1055,1060) 5 = 25 -> 25/45; exposed 1080 - 1060 = 20; slowest bucket 1 (25 us).
  iteration(r0, 0, 1000, 1100);
  fwd(r0, 1000, 1010);
  fwd(r0, 1010, 1020);
  fwd(r0, 1012, 1015);
  bwd(r0, 1020, 1040);
  bwd(r0, 1040, 1060);
  bwd(r0, 1045, 1050);
  comm(r0, 0, 1000, 1030, 1050);
  comm(r0, 1, 2000, 1055, 1080);
  r0.instant("ready fc.weight", "ddp", kComputeLane);
  r0.instant("finalize", "ddp", kComputeLane);

  // Iteration 1 [1100, 1200): forward 15, backward [1115,1150) 35; comm [1120,1140) b0 + [1140,1150) b1 = 30,
  // all under backward -> overlap 1, exposed max(0, 1150 - 1150) = 0; slowest bucket 0 (20 us).
  iteration(r0, 1, 1100, 1200);
  fwd(r0, 1100, 1115);
  bwd(r0, 1115, 1150);
  comm(r0, 0, 1000, 1120, 1140);
  comm(r0, 1, 2000, 1140, 1150);

  // Iteration 2 [1200, 1300): forward 10, backward [1210,1230) 20; comm [1225,1245) b0 + [1245,1275) b1 = 50;
  // overlap [1225,1230) 5 -> 0.1; exposed 1275 - 1230 = 45; slowest bucket 1 (30 us).
  iteration(r0, 2, 1200, 1300);
  fwd(r0, 1200, 1210);
  bwd(r0, 1210, 1230);
  comm(r0, 0, 1000, 1225, 1245);
  comm(r0, 1, 2000, 1245, 1275);

  Tracer r1;
  r1.set_rank(1);
  r1.set_enabled(true);
  iteration(r1, 0, 0, 50);
  fwd(r1, 0, 10);
  bwd(r1, 10, 30);

  LoadedTrace a = parse_chrome_trace(r0.chrome_trace_json(), "rank0");
  LoadedTrace b = parse_chrome_trace(r1.chrome_trace_json(), "rank1");
  a.events.insert(a.events.end(), b.events.begin(), b.events.end());
  return a;
}

}  // namespace

TEST(TraceAnalysis, IntervalArithmetic) {
  EXPECT_DOUBLE_EQ(union_length({{0, 10}, {5, 15}, {20, 25}, {21, 22}}), 20.0);
  EXPECT_DOUBLE_EQ(union_length({}), 0.0);
  EXPECT_DOUBLE_EQ(union_length({{3, 3}}), 0.0);
  EXPECT_DOUBLE_EQ(intersection_length({{0, 10}, {20, 30}}, {{5, 25}}), 10.0);
  EXPECT_DOUBLE_EQ(intersection_length({{0, 10}}, {{10, 20}}), 0.0);
  EXPECT_DOUBLE_EQ(intersection_length({{0, 4}, {2, 8}}, {{1, 3}, {3, 9}}), 7.0);
}

TEST(TraceAnalysis, PerIterationNumbersMatchTheHandComputedAnswers) {
  auto summaries = analyze_trace(synthetic_trace());
  ASSERT_EQ(summaries.size(), 2u);
  const RankSummary& r0 = summaries[0];
  EXPECT_EQ(r0.rank, 0);
  ASSERT_EQ(r0.iterations.size(), 3u);

  const IterationStats& i0 = r0.iterations[0];
  EXPECT_EQ(i0.iteration, 0);
  EXPECT_DOUBLE_EQ(i0.step_us, 100);
  EXPECT_DOUBLE_EQ(i0.forward_us, 20);
  EXPECT_DOUBLE_EQ(i0.backward_us, 40);
  EXPECT_DOUBLE_EQ(i0.comm_us, 45);
  EXPECT_DOUBLE_EQ(i0.exposed_comm_us, 20);
  EXPECT_DOUBLE_EQ(i0.overlap_ratio, 25.0 / 45.0);
  EXPECT_EQ(i0.slowest_bucket.bucket, 1);
  EXPECT_EQ(i0.slowest_bucket.bytes, 2000);
  EXPECT_DOUBLE_EQ(i0.slowest_bucket.dur_us, 25);
  EXPECT_EQ(i0.slowest_bucket.name, "allreduce bucket 1");

  const IterationStats& i1 = r0.iterations[1];
  EXPECT_DOUBLE_EQ(i1.forward_us, 15);
  EXPECT_DOUBLE_EQ(i1.backward_us, 35);
  EXPECT_DOUBLE_EQ(i1.comm_us, 30);
  EXPECT_DOUBLE_EQ(i1.exposed_comm_us, 0);
  EXPECT_DOUBLE_EQ(i1.overlap_ratio, 1.0);
  EXPECT_EQ(i1.slowest_bucket.bucket, 0);
  EXPECT_EQ(i1.slowest_bucket.bytes, 1000);

  const IterationStats& i2 = r0.iterations[2];
  EXPECT_DOUBLE_EQ(i2.comm_us, 50);
  EXPECT_DOUBLE_EQ(i2.exposed_comm_us, 45);
  EXPECT_DOUBLE_EQ(i2.overlap_ratio, 0.1);
  EXPECT_EQ(i2.slowest_bucket.bucket, 1);

  // Medians: forward (20,15,10) -> 15, backward (40,35,20) -> 35, comm (45,30,50) -> 45,
  // exposed (20,0,45) -> 20, overlap (0.556,1,0.1) -> 0.556; bucket 1 slowest twice, durations (25,20,30)
  // -> 25.
  const IterationStats& m = r0.median;
  EXPECT_DOUBLE_EQ(m.step_us, 100);
  EXPECT_DOUBLE_EQ(m.forward_us, 15);
  EXPECT_DOUBLE_EQ(m.backward_us, 35);
  EXPECT_DOUBLE_EQ(m.comm_us, 45);
  EXPECT_DOUBLE_EQ(m.exposed_comm_us, 20);
  EXPECT_DOUBLE_EQ(m.overlap_ratio, 25.0 / 45.0);
  EXPECT_EQ(m.slowest_bucket.bucket, 1);
  EXPECT_EQ(m.slowest_bucket.bytes, 2000);
  EXPECT_DOUBLE_EQ(m.slowest_bucket.dur_us, 25);

  const RankSummary& r1 = summaries[1];
  EXPECT_EQ(r1.rank, 1);
  ASSERT_EQ(r1.iterations.size(), 1u);
  EXPECT_DOUBLE_EQ(r1.iterations[0].forward_us, 10);
  EXPECT_DOUBLE_EQ(r1.iterations[0].backward_us, 20);
  EXPECT_DOUBLE_EQ(r1.iterations[0].comm_us, 0);
  EXPECT_DOUBLE_EQ(r1.iterations[0].exposed_comm_us, 0);
  EXPECT_DOUBLE_EQ(r1.iterations[0].overlap_ratio, 0);
  EXPECT_TRUE(r1.iterations[0].slowest_bucket.name.empty());

  std::string table = format_summary(summaries);
  EXPECT_NE(table.find("median"), std::string::npos);
  EXPECT_NE(table.find("#1 2000 B 0.025 ms"), std::string::npos) << table;
}

TEST(TraceAnalysis, WithoutIterationMarkersTheWholeTraceIsOneIteration) {
  Tracer t;
  t.set_enabled(true);
  // backward [0,100), comm [50,130) and [140,150): union 90, overlap 50, exposed 150 - 100 = 50.
  bwd(t, 0, 100);
  comm(t, 0, 10, 50, 130);
  comm(t, 1, 10, 140, 150);
  auto s = analyze_trace(parse_chrome_trace(t.chrome_trace_json()));
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(s[0].iterations.size(), 1u);
  const IterationStats& it = s[0].iterations[0];
  EXPECT_EQ(it.iteration, -1);
  EXPECT_DOUBLE_EQ(it.step_us, 150);
  EXPECT_DOUBLE_EQ(it.comm_us, 90);
  EXPECT_DOUBLE_EQ(it.overlap_ratio, 50.0 / 90.0);
  EXPECT_DOUBLE_EQ(it.exposed_comm_us, 50);
  EXPECT_EQ(it.slowest_bucket.bucket, 0);
}

TEST(TraceAnalysis, CommWithoutBackwardIsAllExposed) {
  Tracer t;
  t.set_enabled(true);
  iteration(t, 0, 0, 100);
  comm(t, 0, 10, 10, 30);
  auto s = analyze_trace(parse_chrome_trace(t.chrome_trace_json()));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_DOUBLE_EQ(s[0].iterations[0].exposed_comm_us, 20);
  EXPECT_DOUBLE_EQ(s[0].iterations[0].overlap_ratio, 0);
}

TEST(TraceAnalysis, BadTracesAreRejectedByName) {
  EXPECT_THROW(parse_chrome_trace("{", "t.json"), ddp::Error);
  try {
    parse_chrome_trace(R"({"traceEvents":[{"name":"a","ph":"X","ts":1,"pid":0,"tid":1}]})", "t.json");
    FAIL();
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("trace 't.json': event 0 (a) needs a numeric \"dur\""),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_chrome_trace(R"({"events":[]})", "t.json"), ddp::Error);
  // The bare-array form is accepted.
  auto t = parse_chrome_trace(R"([{"name":"a","cat":"forward","ph":"X","ts":1,"dur":2,"pid":4,"tid":1}])");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].pid, 4);
}

TEST(TraceSummaryTool, PrintsTheTableForATraceFile) {
  const std::string tool = std::string(DDP_BIN_DIR) + "/trace_summary";
  if (!std::filesystem::exists(tool))
    GTEST_SKIP() << "bin/trace_summary not built (build target trace_summary)";
  const std::string dir = ::testing::TempDir() + "ddp_trace_tool_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Tracer t;
  t.set_rank(2);
  t.set_enabled(true);
  iteration(t, 5, 0, 100);
  bwd(t, 0, 60);
  comm(t, 3, 4096, 40, 90);
  t.write_chrome_trace(dir + "/r2.json");
  const std::string cmd = tool + " " + dir + "/r2.json > " + dir + "/out.txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(dir + "/out.txt");
  std::string out((std::istreambuf_iterator<char>(in)), {});
  // exposed 90 - 60 = 30 us; overlap 20 of 50 = 40%.
  EXPECT_NE(out.find("#3 4096 B 0.050 ms"), std::string::npos) << out;
  EXPECT_NE(out.find("0.030"), std::string::npos) << out;
  EXPECT_NE(out.find("40.0%"), std::string::npos) << out;
  const std::string bad = tool + " " + dir + "/missing.json > " + dir + "/err.txt 2>&1";
  EXPECT_NE(std::system(bad.c_str()), 0);
  std::filesystem::remove_all(dir);
}

TEST(TraceAnalysis, FinalizeInstantEndsBackwardCompute) {
  // A backward span [0,100) that contains the reducer's finalize at 80 (the wait for communication runs inside
  // autograd::backward): backward compute is [0,80); comm [50,95) -> exposed 95 - 80 = 15, overlap 30/45.
  Tracer t;
  t.set_enabled(true);
  iteration(t, 0, 0, 100);
  bwd(t, 0, 100);
  comm(t, 0, 10, 50, 95);
  t.record("finalize", "ddp", kComputeLane, 'i', 80 * us, 0, nullptr, 0);
  auto s = analyze_trace(parse_chrome_trace(t.chrome_trace_json()));
  ASSERT_EQ(s.size(), 1u);
  const IterationStats& it = s[0].iterations[0];
  EXPECT_DOUBLE_EQ(it.backward_us, 80);
  EXPECT_DOUBLE_EQ(it.exposed_comm_us, 15);
  EXPECT_DOUBLE_EQ(it.overlap_ratio, 30.0 / 45.0);
}

// ZeRO-2/3: the forward and backward waiting for parameter all-gathers ("gather wait" spans on the compute
// lane) is its own figure; the gathers themselves ("gather" on the comm lane) do not count as gradient
// communication. Iteration [0, 100): waits [10,14) and [12,20) -> union 10 us; [50,55) -> 5; total 15.
TEST(TraceAnalysis, GatherWaitIsReportedApartFromGradientCommunication) {
  Tracer t;
  t.set_rank(0);
  t.set_enabled(true);
  iteration(t, 0, 0, 100);
  fwd(t, 0, 40);
  bwd(t, 40, 90);
  t.complete("all-gather bucket 0", "gather", kCommLane, 5 * us, 20 * us, {{"bucket", 0}});
  t.complete("wait all-gather bucket 0", "gather wait", kComputeLane, 10 * us, 14 * us, {{"bucket", 0}});
  t.complete("wait all-gather bucket 1", "gather wait", kComputeLane, 12 * us, 20 * us, {{"bucket", 1}});
  t.complete("wait all-gather bucket 1", "gather wait", kComputeLane, 50 * us, 55 * us, {{"bucket", 1}});
  comm(t, 0, 64, 60, 95);
  auto s = analyze_trace(parse_chrome_trace(t.chrome_trace_json(), "rank0"));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_DOUBLE_EQ(s[0].iterations[0].gather_wait_us, 15.0);
  EXPECT_DOUBLE_EQ(s[0].iterations[0].comm_us, 35.0);  // the reduce-scatter only
  EXPECT_NE(format_summary(s).find("waiting for parameter all-gathers 0.015 ms per step"), std::string::npos)
      << format_summary(s);
}
