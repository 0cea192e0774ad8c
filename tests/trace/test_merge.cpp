// test_merge.cpp - merging per-rank trace files puts all ranks on one time axis (aligned on each file's
// wall-clock start) and refuses inputs it cannot align or that repeat a rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/trace/trace.h"
#include "runtime/trace/trace_analysis.h"

using namespace ddp;
using namespace ddp::trace;
using json = nlohmann::json;

namespace {

class MergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "ddp_trace_merge_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  void write(const std::string& name, const json& doc) const { std::ofstream(file(name)) << doc.dump(); }

  // A one-rank trace with its time 0 at `start_unix_us` and one event at ts 10 us lasting 5 us.
  static json rank_file(int rank, int64_t start_unix_us) {
    return {{"traceEvents",
             {{{"name", "process_name"},
               {"ph", "M"},
               {"pid", rank},
               {"tid", 0},
               {"args", {{"name", "rank " + std::to_string(rank)}}}},
              {{"name", "step"},
               {"cat", "forward"},
               {"ph", "X"},
               {"ts", 10.0},
               {"dur", 5.0},
               {"pid", rank},
               {"tid", 1},
               {"args", json::object()}}}},
            {"otherData", {{"rank", rank}, {"start_unix_us", start_unix_us}}}};
  }

  std::string dir_;
};

double ts_of(const json& doc, int pid, const std::string& name) {
  for (const json& e : doc["traceEvents"])
    if (e.value("name", "") == name && e["pid"] == pid) return e["ts"].get<double>();
  throw std::runtime_error("event not found");
}

}  // namespace

TEST_F(MergeTest, AlignsOnTheEarliestWallClockStart) {
  // rank 1 started 250 us after rank 0; rank 2 started 1000 us after rank 0. Given out of order.
  write("r1.json", rank_file(1, 1'000'250));
  write("r0.json", rank_file(0, 1'000'000));
  write("r2.json", rank_file(2, 1'001'000));
  merge_chrome_traces({file("r1.json"), file("r0.json"), file("r2.json")}, file("all.json"));
  json merged = json::parse(std::ifstream(file("all.json")));
  EXPECT_EQ(merged["otherData"]["start_unix_us"], 1'000'000);
  EXPECT_EQ(merged["otherData"]["ranks"], json({0, 1, 2}));
  EXPECT_EQ(merged["otherData"]["merged_from"].size(), 3u);
  EXPECT_DOUBLE_EQ(ts_of(merged, 0, "step"), 10.0);
  EXPECT_DOUBLE_EQ(ts_of(merged, 1, "step"), 260.0);
  EXPECT_DOUBLE_EQ(ts_of(merged, 2, "step"), 1010.0);
  // Metadata (no ts) is carried over untouched.
  LoadedTrace loaded = load_chrome_trace(file("all.json"));
  EXPECT_EQ(loaded.process_names.size(), 3u);
  EXPECT_EQ(loaded.process_names[2], "rank 2");
}

TEST_F(MergeTest, TwoRealTracersMergeWithOneProcessPerRank) {
  Tracer a, b;
  a.set_rank(0);
  b.set_rank(1);
  a.set_enabled(true);
  b.set_enabled(true);
  a.complete("allreduce bucket 0", "comm", kCommLane, 0, 1000, {{"bucket", 0}, {"bytes", 8}});
  b.complete("allreduce bucket 0", "comm", kCommLane, 0, 1000, {{"bucket", 0}, {"bytes", 8}});
  a.write_chrome_trace(file("a.json"));
  b.write_chrome_trace(file("b.json"));
  merge_chrome_traces({file("a.json"), file("b.json")}, file("m.json"));
  json merged = json::parse(std::ifstream(file("m.json")));
  // b was created after a, so its event moves right by exactly the difference of the starts.
  const double expected_shift = static_cast<double>(b.start_unix_us() - a.start_unix_us());
  EXPECT_GE(expected_shift, 0.0);
  EXPECT_DOUBLE_EQ(ts_of(merged, 1, "allreduce bucket 0") - ts_of(merged, 0, "allreduce bucket 0"),
                   expected_shift);
  auto summary = analyze_trace(load_chrome_trace(file("m.json")));
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_DOUBLE_EQ(summary[1].iterations[0].comm_us, 1.0);
}

TEST_F(MergeTest, RefusesRepeatedRanksAndUnalignableFiles) {
  write("r0.json", rank_file(0, 5));
  write("again.json", rank_file(0, 7));
  try {
    merge_chrome_traces({file("r0.json"), file("again.json")}, file("out.json"));
    FAIL();
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 appears in both"), std::string::npos) << e.what();
  }
  json no_start = rank_file(1, 0);
  no_start.erase("otherData");
  write("nostart.json", no_start);
  try {
    merge_chrome_traces({file("r0.json"), file("nostart.json")}, file("out.json"));
    FAIL();
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no otherData.start_unix_us"), std::string::npos) << e.what();
  }
  std::ofstream(file("bad.json")) << "{\"traceEvents\": [";
  EXPECT_THROW(merge_chrome_traces({file("bad.json")}, file("out.json")), ddp::Error);
  EXPECT_THROW(merge_chrome_traces({file("none.json")}, file("out.json")), ddp::Error);
  EXPECT_THROW(merge_chrome_traces({}, file("out.json")), ddp::Error);
  EXPECT_FALSE(std::filesystem::exists(file("out.json")));
}

namespace {

json with_clock(json doc, double offset_us, double bound_us, int64_t reference_start_unix_us) {
  doc["otherData"]["clock"] = {{"reference_rank", 0},
                               {"reference_start_unix_us", reference_start_unix_us},
                               {"offset_us", offset_us},
                               {"error_bound_us", bound_us},
                               {"rounds", 8}};
  return doc;
}

json timed_event(int rank, const std::string& name, double ts) {
  return {{"name", name}, {"cat", "comm"}, {"ph", "X"}, {"ts", ts}, {"dur", 1.0}, {"pid", rank}, {"tid", 2},
          {"args", json::object()}};
}

std::vector<double> timestamps(const json& doc) {
  std::vector<double> ts;
  for (const json& e : doc["traceEvents"])
    if (e.contains("ts")) ts.push_back(e["ts"].get<double>());
  return ts;
}

}  // namespace

TEST_F(MergeTest, MergedEventsAreSortedByTimeAfterTheMetadata) {
  // Interleaved ranks, and a file whose own events are out of order (a hand-written or older file).
  json r0 = rank_file(0, 1'000'000), r1 = rank_file(1, 1'000'003);
  for (double ts : {40.0, 5.0, 22.0}) r0["traceEvents"].push_back(timed_event(0, "a", ts));
  for (double ts : {1.0, 30.0, 7.0}) r1["traceEvents"].push_back(timed_event(1, "b", ts));
  write("r0.json", r0);
  write("r1.json", r1);
  merge_chrome_traces({file("r1.json"), file("r0.json")}, file("m.json"));
  const json merged = json::parse(std::ifstream(file("m.json")));
  const std::vector<double> ts = timestamps(merged);
  EXPECT_EQ(ts.size(), 8u);
  EXPECT_TRUE(std::is_sorted(ts.begin(), ts.end())) << merged["traceEvents"].dump();
  bool seen_timed = false;
  for (const json& e : merged["traceEvents"]) {
    if (e.contains("ts")) seen_timed = true;
    EXPECT_FALSE(seen_timed && e.value("ph", "") == "M") << "metadata after a timed event: " << e.dump();
  }
  EXPECT_EQ(merged["otherData"]["clock"]["alignment"], "wall");
}

TEST_F(MergeTest, TheCommonClockShiftsEachRankByItsRecordedOffset) {
  // Rank 1's clock reads 300 us less than rank 0's at the same instant (offset +300); rank 2's reads 120 us
  // more (offset -120), so it moves left, and everything right by 120 so nothing lands before 0. The wall
  // clocks (start_unix_us) disagree wildly and must not matter.
  write("r0.json", with_clock(rank_file(0, 5'000'000), 0, 0, 5'000'000));
  write("r1.json", with_clock(rank_file(1, 9'999'999), 300, 12.5, 5'000'000));
  write("r2.json", with_clock(rank_file(2, 1), -120, 40, 5'000'000));
  merge_chrome_traces({file("r0.json"), file("r1.json"), file("r2.json")}, file("m.json"));
  const json merged = json::parse(std::ifstream(file("m.json")));
  EXPECT_DOUBLE_EQ(ts_of(merged, 0, "step"), 10.0 + 120);
  EXPECT_DOUBLE_EQ(ts_of(merged, 1, "step"), 10.0 + 300 + 120);
  EXPECT_DOUBLE_EQ(ts_of(merged, 2, "step"), 10.0 - 120 + 120);
  const json& clock = merged["otherData"]["clock"];
  EXPECT_EQ(clock["alignment"], "common");
  EXPECT_EQ(clock["reference_rank"], 0);
  EXPECT_DOUBLE_EQ(clock["max_error_bound_us"].get<double>(), 40.0);
  ASSERT_EQ(clock["inputs"].size(), 3u);
  EXPECT_EQ(clock["inputs"][1]["rank"], 1);
  EXPECT_DOUBLE_EQ(clock["inputs"][1]["error_bound_us"].get<double>(), 12.5);
  // Time 0 of the merged file is 120 us before rank 0's time 0, on rank 0's wall clock.
  EXPECT_EQ(merged["otherData"]["start_unix_us"], 5'000'000 - 120);
  const std::vector<double> ts = timestamps(merged);
  EXPECT_TRUE(std::is_sorted(ts.begin(), ts.end()));
}

TEST_F(MergeTest, WithoutAClockSyncOnEveryFileOfOneJobItFallsBackToTheWallClock) {
  // One file without a clock sync, or one synchronized against another job's rank 0: the wall clock for all.
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    write("r0.json", with_clock(rank_file(0, 1'000'000), 0, 0, 1'000'000));
    write("r1.json", variant == 0 ? rank_file(1, 1'000'250) : with_clock(rank_file(1, 1'000'250), 300, 1, 777));
    merge_chrome_traces({file("r0.json"), file("r1.json")}, file("m.json"));
    const json merged = json::parse(std::ifstream(file("m.json")));
    EXPECT_EQ(merged["otherData"]["clock"]["alignment"], "wall");
    EXPECT_DOUBLE_EQ(ts_of(merged, 1, "step"), 260.0);
    EXPECT_EQ(merged["otherData"]["start_unix_us"], 1'000'000);
  }
}

TEST(RankTracePath, InsertsTheRankBeforeTheExtension) {
  EXPECT_EQ(rank_trace_path("t.json", 0), "t.rank0.json");
  EXPECT_EQ(rank_trace_path("runs/a.b/trace.json", 12), "runs/a.b/trace.rank12.json");
  EXPECT_EQ(rank_trace_path("runs/a.b/trace", 1), "runs/a.b/trace.rank1");
  EXPECT_EQ(rank_trace_path("trace", 3), "trace.rank3");
  EXPECT_EQ(rank_trace_path("runs/.trace", 1), "runs/.trace.rank1");
  EXPECT_EQ(rank_trace_path(".trace", 1), ".trace.rank1");
}
