// test_trace_one_clock.cpp - a real two-rank `train --trace` run: the per-rank files follow the one naming
// rule (t.rank<R>.json), the merged file is on rank 0's clock with every rank's offset bound recorded and
// sane, its events are sorted, no all-reduce ends on one rank before the other rank issued it (causality on
// the common clock, up to the two bounds), and one step has one number in the log ("step N"), DDP_DEBUG
// ("step N: backward ..."), the trace ("iteration N", the exposed-communication span) - after a resume too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_process.h"

namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

struct TrainRun {
  ddp::testing::ProcessResult result;
  json merged;
};

class TraceOneClock : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ddp_trace_one_clock_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Two ranks of train on the MLP, several buckets, DDP_DEBUG=INFO, a log line per step.
  TrainRun train(const std::string& trace, const std::string& extra) {
    std::vector<std::string> argv = {ddp::testing::ddprun_path(), "--standalone", "--nproc-per-node", "2",
                                     DDP_BIN_DIR "/train"};
    std::istringstream flags(
        "--model mlp --data synthetic --hidden 64 --synthetic-samples 128 --batch-size 8 --bucket-cap-mb "
        "0.002 "
        "--first-bucket-mb 0.002 --eval-batches 1 --log-interval 1 --threads 1 " +
        extra);
    for (std::string f; flags >> f;) argv.push_back(f);
    argv.insert(argv.end(), {"--trace", trace});
    ddp::testing::ProcessOptions options;
    options.set_env = {{"OPENBLAS_NUM_THREADS", "1"}, {"DDP_DEBUG", "INFO"}};
    options.timeout_s = 120;
    TrainRun run{ddp::testing::run_process(argv, options), json()};
    if (run.result.exit_code == 0 && fs::exists(trace)) run.merged = json::parse(std::ifstream(trace));
    return run;
  }

  fs::path dir_;
};

// Iteration numbers of the trace's iteration markers, per rank.
std::map<int64_t, std::set<int64_t>> iterations_of(const json& doc) {
  std::map<int64_t, std::set<int64_t>> out;
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "iteration")
      out[e["pid"].get<int64_t>()].insert(e["args"]["iteration"].get<int64_t>());
  return out;
}

// The numbers N of lines matching `re` (one capture group) in `text`, each as often as it occurs.
std::multiset<int64_t> numbers(const std::string& text, const std::string& re) {
  std::multiset<int64_t> out;
  const std::regex r(re);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), r); it != std::sregex_iterator(); ++it)
    out.insert(std::stoll((*it)[1]));
  return out;
}

}  // namespace

TEST_F(TraceOneClock, TwoRanksShareRankZerosClockWithinTheRecordedBounds) {
  const std::string trace = (dir_ / "t.json").string();
  const TrainRun run = train(trace, "--steps 4");
  ASSERT_EQ(run.result.exit_code, 0) << run.result.out << run.result.err;
  // One naming rule: ".rank<R>" before the extension.
  EXPECT_TRUE(fs::exists(dir_ / "t.rank0.json"));
  EXPECT_TRUE(fs::exists(dir_ / "t.rank1.json"));
  EXPECT_FALSE(fs::exists(dir_ / "t.json.rank0")) << "the old name";

  const json& clock = run.merged["otherData"]["clock"];
  ASSERT_EQ(clock.value("alignment", ""), "common") << clock.dump();
  std::map<int64_t, double> bound_us;
  for (const json& in : clock["inputs"])
    bound_us[in["rank"].get<int64_t>()] = in["error_bound_us"].get<double>();
  ASSERT_EQ(bound_us.size(), 2u);
  EXPECT_EQ(bound_us[0], 0.0) << "rank 0 is the reference";
  EXPECT_GT(bound_us[1], 0.0);
  EXPECT_LT(bound_us[1], 1e6) << "a bound of a second is not sane";

  // Sorted by time.
  double last = -1e300;
  for (const json& e : run.merged["traceEvents"]) {
    if (!e.contains("ts")) continue;
    EXPECT_GE(e["ts"].get<double>(), last) << e.dump();
    last = e["ts"].get<double>();
  }

  // Causality: all-reduce k of iteration i cannot finish on a rank before every rank issued it.
  struct Span {
    double begin, end;
  };
  std::map<std::pair<int64_t, int64_t>, std::pair<double, double>> window;  // (rank, iteration) -> [b, e)
  for (const json& e : run.merged["traceEvents"])
    if (e.value("cat", "") == "iteration")
      window[{e["pid"], e["args"]["iteration"]}] = {e["ts"].get<double>(),
                                                    e["ts"].get<double>() + e["dur"].get<double>()};
  std::map<std::tuple<int64_t, int64_t, int64_t>, Span> bucket;  // (iteration, bucket, rank)
  for (const json& e : run.merged["traceEvents"]) {
    if (e.value("cat", "") != "comm") continue;
    const int64_t rank = e["pid"];
    const double ts = e["ts"];
    for (const auto& [key, w] : window)
      if (key.first == rank && ts >= w.first && ts < w.second)
        bucket[{key.second, e["args"]["bucket"], rank}] = {ts, ts + e["dur"].get<double>()};
  }
  int checked = 0;
  for (const auto& [key, span] : bucket) {
    const auto [it, b, rank] = key;
    const auto other = bucket.find({it, b, 1 - rank});
    ASSERT_NE(other, bucket.end()) << "iteration " << it << " bucket " << b << " only on rank " << rank;
    EXPECT_GE(span.end + bound_us[0] + bound_us[1], other->second.begin)
        << "iteration " << it << " bucket " << b << ": rank " << rank << " finished its all-reduce at "
        << span.end << " us, before rank " << 1 - rank << " issued it at " << other->second.begin << " us";
    ++checked;
  }
  EXPECT_GE(checked, 2 * 4 * 3) << "expected several buckets per step";
}

TEST_F(TraceOneClock, OneStepHasOneNumberInTheLogDdpDebugAndTheTrace) {
  const std::string trace = (dir_ / "t.json").string();
  const TrainRun first = train(trace, "--steps 2 --checkpoint-dir " + (dir_ / "ck").string());
  ASSERT_EQ(first.result.exit_code, 0) << first.result.out << first.result.err;
  const TrainRun resumed = train((dir_ / "r.json").string(),
                                 "--steps 4 --checkpoint-dir " + (dir_ / "ck").string() + " --resume auto");
  ASSERT_EQ(resumed.result.exit_code, 0) << resumed.result.out << resumed.result.err;
  for (const auto& [run, steps] :
       {std::pair{&first, std::multiset<int64_t>{1, 2}}, std::pair{&resumed, std::multiset<int64_t>{3, 4}}}) {
    const std::string all = run->result.out + run->result.err;
    EXPECT_EQ(numbers(run->result.out, R"(step +(\d+)/\d+)"), steps) << run->result.out;
    std::multiset<int64_t> both;  // DDP_DEBUG=INFO: one reducer line per step on each rank
    for (int64_t s : steps) both.insert({s, s});
    EXPECT_EQ(numbers(all, R"(step (\d+): backward)"), both) << all;
    const auto its = iterations_of(run->merged);
    const std::set<int64_t> want(steps.begin(), steps.end());
    EXPECT_EQ(its.at(0), want);
    EXPECT_EQ(its.at(1), want);
    std::multiset<int64_t> exposed;
    for (const json& e : run->merged["traceEvents"])
      if (e.value("cat", "") == "exposed") exposed.insert(e["args"]["iteration"].get<int64_t>());
    EXPECT_EQ(exposed, both);
  }
}
