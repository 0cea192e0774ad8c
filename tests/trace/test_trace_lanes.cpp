// test_trace_lanes.cpp - no two complete events on one (pid, tid) overlap partially, the shape Perfetto
// drops: the writer moves such events to extra tracks of their lane, keeps nested ones (forward scopes)
// together, and a real two-rank multi-bucket training trace obeys the rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "runtime/trace/trace.h"
#include "tests/support/run_process.h"

using namespace ddp::trace;
using json = nlohmann::json;

namespace {

struct Span {
  double begin, end;
  std::string name;
};

// Every pair of complete events on one (pid, tid) that overlaps without one containing the other.
std::vector<std::string> partial_overlaps(const json& doc) {
  std::map<std::pair<int64_t, int64_t>, std::vector<Span>> lanes;
  for (const json& e : doc["traceEvents"])
    if (e.value("ph", "") == "X")
      lanes[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}].push_back(
          {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>(),
           e["name"].get<std::string>()});
  std::vector<std::string> bad;
  for (auto& [key, spans] : lanes)
    for (size_t i = 0; i < spans.size(); ++i)
      for (size_t j = 0; j < spans.size(); ++j) {
        const Span &a = spans[i], &b = spans[j];
        if (i != j && a.begin <= b.begin && b.begin < a.end && a.end < b.end && !(a.begin == b.begin))
          bad.push_back("pid " + std::to_string(key.first) + " tid " + std::to_string(key.second) + ": '" +
                        a.name + "' [" + std::to_string(a.begin) + ", " + std::to_string(a.end) + ") and '" +
                        b.name + "' [" + std::to_string(b.begin) + ", " + std::to_string(b.end) + ")");
      }
  return bad;
}

int64_t tid_of(const json& doc, const std::string& name) {
  for (const json& e : doc["traceEvents"])
    if (e.value("name", "") == name) return e["tid"].get<int64_t>();
  return -1;
}

std::string thread_name(const json& doc, int64_t tid) {
  for (const json& e : doc["traceEvents"])
    if (e.value("name", "") == "thread_name" && e["tid"] == tid) return e["args"]["name"];
  return "";
}

}  // namespace

TEST(TraceLanes, PartiallyOverlappingEventsGoToExtraTracksNestedOnesStay) {
  Tracer t;
  t.set_enabled(true);
  // Three all-reduces queued behind each other: each starts before the previous one ends.
  t.complete("allreduce bucket 0", "comm", kCommLane, 100, 400);
  t.complete("allreduce bucket 1", "comm", kCommLane, 200, 600);
  t.complete("allreduce bucket 2", "comm", kCommLane, 300, 800);
  t.complete("allreduce bucket 3", "comm", kCommLane, 250, 350);  // inside bucket 0: nests on the lane
  t.complete("allreduce bucket 4", "comm", kCommLane, 900, 950);  // after all: back on the lane itself
  // Nested compute scopes stay on the compute lane.
  t.complete("forward", "forward", kComputeLane, 0, 1000);
  t.complete("linear", "forward", kComputeLane, 10, 20);
  const json doc = json::parse(t.chrome_trace_json());
  EXPECT_TRUE(partial_overlaps(doc).empty());
  EXPECT_EQ(tid_of(doc, "allreduce bucket 0"), kCommLane);
  EXPECT_EQ(tid_of(doc, "allreduce bucket 1"), kCommLane + kExtraTrackTidStride);
  EXPECT_EQ(tid_of(doc, "allreduce bucket 2"), kCommLane + 2 * kExtraTrackTidStride);
  EXPECT_EQ(tid_of(doc, "allreduce bucket 3"), kCommLane);
  EXPECT_EQ(tid_of(doc, "allreduce bucket 4"), kCommLane);
  EXPECT_EQ(tid_of(doc, "linear"), kComputeLane);
  EXPECT_EQ(thread_name(doc, kCommLane + kExtraTrackTidStride), "comm 2");
  EXPECT_EQ(thread_name(doc, kCommLane + 2 * kExtraTrackTidStride), "comm 3");
  EXPECT_EQ(thread_name(doc, kComputeLane + kExtraTrackTidStride), "") << "no extra track without need";
}

TEST(TraceLanes, ARealMultiBucketTwoRankRunHasNoPartialOverlapOnAnyLane) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ddp_trace_lanes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = (dir / "trace.json").string();
  // Small buckets (about 20 per step) so several all-reduces are queued at once.
  std::vector<std::string> argv = {ddp::testing::ddprun_path(), "--standalone", "--nproc-per-node", "2",
                                   DDP_BIN_DIR "/train"};
  std::istringstream flags(
      "--model gpt --data synthetic --steps 4 --batch-size 4 --context 16 --d-model 32 --n-layer 2 "
      "--synthetic-samples 64 --bucket-cap-mb 0.01 --first-bucket-mb 0.01 --eval-batches 1 --log-interval 0 "
      "--sample-tokens 0 --threads 1");
  for (std::string f; flags >> f;) argv.push_back(f);
  argv.insert(argv.end(), {"--trace", trace});
  ddp::testing::ProcessOptions options;
  options.set_env = {{"OPENBLAS_NUM_THREADS", "1"}};
  options.timeout_s = 120;
  const ddp::testing::ProcessResult r = ddp::testing::run_process(argv, options);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(trace);
  const json doc = json::parse(in);
  int allreduces = 0;
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "comm" && e.value("ph", "") == "X") ++allreduces;
  EXPECT_GE(allreduces, 2 * 4 * 5) << "expected several buckets per step on both ranks";
  const std::vector<std::string> bad = partial_overlaps(doc);
  EXPECT_TRUE(bad.empty()) << bad.size() << " partial overlaps, first: " << bad.front();
  fs::remove_all(dir);
}
