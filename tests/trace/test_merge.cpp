// test_merge.cpp - merging per-rank trace files puts all ranks on one time axis (aligned on each file's
// wall-clock start) and refuses inputs it cannot align or that repeat a rank.
#include <gtest/gtest.h>
#include <unistd.h>

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
