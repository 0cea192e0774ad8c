// test_flight_scenarios.cpp - the flight recorder end to end, as processes under ddprun
// (tests/progs/flight_faults.cpp): a rank SIGSTOPped mid-training (ddprun's stall watchdog asks the others for
// their records and stops the job), a rank SIGKILLed (no record from it; the others are asked before they are
// stopped), a rank whose comm hook skips one bucket's all-reduce, one that all-reduces a bucket one element
// short, uneven steps without Join (the rank that finished leaves an "exit" record), a rank that skips ZeRO's
// broadcasts, and a run that succeeds (its temporary flight folder is removed). Each checks ddprun's exit code
// and summary, which ranks left a record, what the records say about the collective that broke the step, and
// that ddp_flight's first sentence names the right rank, collective and bucket.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/support/run_process.h"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string faults_path() { return std::string(DDP_BIN_DIR) + "/testprog_flight_faults"; }

// ddp_flight's first line on the records in `dir`.
std::string verdict(const std::string& dir) {
  auto r = run_process({std::string(DDP_BIN_DIR) + "/ddp_flight", dir});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out.substr(0, r.out.find('\n'));
}

// Every piece appears in the text, in this order.
::testing::AssertionResult says_in_order(const std::string& text, const std::vector<std::string>& pieces) {
  size_t at = 0;
  for (const auto& p : pieces) {
    const size_t found = text.find(p, at);
    if (found == std::string::npos)
      return ::testing::AssertionFailure() << "'" << p << "' missing (in order) from: " << text;
    at = found + p.size();
  }
  return ::testing::AssertionSuccess();
}

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ddp_flightrun_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::optional<json> record(const std::string& dir, int rank) {
  std::ifstream f(dir + "/flight.rank" + std::to_string(rank) + ".json");
  if (!f.good()) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

// The first entry not completed, or null.
json first_unfinished(const json& rec) {
  for (const auto& e : rec["entries"])
    if (e["state"] != "completed") return e;
  return nullptr;
}

json entry_with_seq(const json& rec, int64_t seq) {
  for (const auto& e : rec["entries"])
    if (e["seq"] == seq) return e;
  return nullptr;
}

ProcessResult run_faults(const std::string& dir, int world, const std::vector<std::string>& prog_args,
                         double stall_timeout_s = 2) {
  // --standalone: a free port of its own (these tests run beside others under ctest -j; the default 29500
  // was taken by a concurrent scenario: "Address already in use").
  std::vector<std::string> argv{ddprun_path(),       "--standalone", "--nproc-per-node", std::to_string(world),
                                "--stall-timeout",   std::to_string(stall_timeout_s),
                                "--grace-period",    "1",
                                "--flight-dir",      dir,
                                faults_path()};
  argv.insert(argv.end(), prog_args.begin(), prog_args.end());
  ProcessOptions o;
  o.timeout_s = 90;
  o.unset_env = {"DDP_FLIGHT_RECORDER_DIR", "DDP_FLIGHT_RECORDER_ENTRIES", "DDP_COLLECTIVE_TIMEOUT_S"};
  return run_process(argv, o);
}

// Rank 1 stops itself (SIGSTOP) before its backward of step 3: ranks 0 and 2 wait on that step's first bucket;
// the watchdog sees them wait with no progress, asks them for their records, and stops the job (124).
TEST(FlightScenarios, SigstoppedRankIsSeenByTheStallWatchdog) {
  const std::string dir = temp_dir("stop");
  auto r = run_faults(dir, 3, {"--fault", "stop", "--fault-rank", "1", "--fault-step", "3"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("stall watchdog"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 (pid"), std::string::npos) << r.err;  // named as stopped
  EXPECT_NE(r.err.find("flight records of ranks 0, 2 (none from rank 1) in " + dir), std::string::npos) << r.err;
  EXPECT_FALSE(record(dir, 1).has_value());
  for (int rank : {0, 2}) {
    auto rec = record(dir, rank);
    ASSERT_TRUE(rec.has_value()) << rank << "\n" << r.err;
    EXPECT_EQ((*rec)["reason"], "signal");
    EXPECT_EQ((*rec)["version"], 2);
    const json e = first_unfinished(*rec);
    ASSERT_FALSE(e.is_null()) << rec->dump();
    EXPECT_EQ(e["iteration"], 3);
    EXPECT_EQ(e["issuer"], "ddp bucket");
    EXPECT_EQ(e["bucket"], 0);  // the first bucket of step 3
    EXPECT_EQ(e["params"], "fc3.bias");
    EXPECT_EQ(e["bucket_bytes"], 16);
  }
  const int64_t seq = first_unfinished(*record(dir, 0))["seq"].get<int64_t>();
  EXPECT_TRUE(says_in_order(verdict(dir), {"rank 1 left no dump", "ranks 0 and 2 waited", "allreduce #" +
                                           std::to_string(seq), "bucket 0: fc3.bias", "iteration 3"}));
  fs::remove_all(dir);
}

// Rank 1 is SIGKILLed: no record from it; rank 0 is asked for its record before ddprun stops it.
TEST(FlightScenarios, KilledRankLeavesNoRecordTheOthersDo) {
  const std::string dir = temp_dir("kill");
  auto r = run_faults(dir, 2, {"--fault", "kill", "--fault-rank", "1", "--fault-step", "3"});
  EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
  EXPECT_NE(r.err.find("flight records of rank 0 (none from rank 1) in " + dir), std::string::npos) << r.err;
  EXPECT_FALSE(record(dir, 1).has_value());
  auto rec = record(dir, 0);
  ASSERT_TRUE(rec.has_value()) << r.err;
  // ddprun's SIGUSR1, or - when rank 0's shm collective saw its peer die first - the failure record.
  EXPECT_TRUE((*rec)["reason"] == "signal" || (*rec)["reason"] == "failure") << (*rec)["reason"];
  const json e = first_unfinished(*rec);
  ASSERT_FALSE(e.is_null()) << rec->dump();
  EXPECT_EQ(e["iteration"], 3);
  EXPECT_EQ(e["bucket"], 0);
  EXPECT_TRUE(says_in_order(verdict(dir), {"rank 1 left no dump", "rank 0 waited",
                                           "allreduce #" + std::to_string(e["seq"].get<int64_t>()),
                                           "bucket 0: fc3.bias", "iteration 3"}));
  fs::remove_all(dir);
}

// Rank 1's hook skips bucket 2's all-reduce in step 3: at that sequence number rank 0 all-reduces bucket 2 and
// rank 1 already bucket 3 (shm checks every collective's shape: a mismatch, on both ranks).
TEST(FlightScenarios, SkippedBucketShowsAsTheSequenceNumberWhereTheRanksDiffer) {
  const std::string dir = temp_dir("skip");
  auto r = run_faults(dir, 2, {"--fault", "skip-bucket", "--fault-rank", "1", "--fault-step", "3", "--bucket",
                               "2", "--backend", "shm"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto r0 = record(dir, 0), r1 = record(dir, 1);
  ASSERT_TRUE(r0 && r1) << r.err;
  EXPECT_EQ((*r0)["reason"], "failure");
  EXPECT_EQ((*r1)["reason"], "failure");
  const json e0 = first_unfinished(*r0);
  ASSERT_FALSE(e0.is_null());
  const json e1 = entry_with_seq(*r1, e0["seq"].get<int64_t>());
  ASSERT_FALSE(e1.is_null());
  EXPECT_EQ(e0["bucket"], 2);
  EXPECT_EQ(e1["bucket"], 3);
  EXPECT_EQ(e0["iteration"], 3);
  EXPECT_NE(e0["count"], e1["count"]);
  const std::string v = verdict(dir);
  EXPECT_TRUE(says_in_order(v, {"#" + std::to_string(e0["seq"].get<int64_t>()), "rank 0", "bucket 2", "rank 1",
                                "bucket 3"}));
  fs::remove_all(dir);
}

// Rank 1 all-reduces bucket 2 of step 3 one element short: the same bucket, another count.
TEST(FlightScenarios, SizeMismatchIsRecordedByBothRanks) {
  const std::string dir = temp_dir("size");
  auto r = run_faults(dir, 2, {"--fault", "size", "--fault-rank", "1", "--fault-step", "3", "--bucket", "2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto r0 = record(dir, 0), r1 = record(dir, 1);
  ASSERT_TRUE(r0 && r1) << r.err;
  const json e0 = first_unfinished(*r0);
  ASSERT_FALSE(e0.is_null());
  const json e1 = entry_with_seq(*r1, e0["seq"].get<int64_t>());
  ASSERT_FALSE(e1.is_null());
  EXPECT_EQ(e0["bucket"], 2);
  EXPECT_EQ(e1["bucket"], 2);
  EXPECT_EQ(e0["count"].get<int64_t>(), e1["count"].get<int64_t>() + 1);
  EXPECT_TRUE((*r0)["failure"].is_string());
  EXPECT_TRUE(says_in_order(verdict(dir), {"#" + std::to_string(e0["seq"].get<int64_t>()), "count", "rank 0",
                                           "x 32", "bucket 2", "rank 1", "x 31"}));
  fs::remove_all(dir);
}

// Rank 1 runs out of data before step 3 and exits normally (no Join): its record says "exit" and ends where
// rank 0's failed collective begins.
TEST(FlightScenarios, UnevenStepsLeaveAnExitRecordFromTheRankThatFinished) {
  const std::string dir = temp_dir("uneven");
  auto r = run_faults(dir, 2, {"--fault", "uneven", "--fault-rank", "1", "--fault-step", "3"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto r0 = record(dir, 0), r1 = record(dir, 1);
  ASSERT_TRUE(r0 && r1) << r.err;
  EXPECT_EQ((*r1)["reason"], "exit");
  EXPECT_TRUE((*r1)["failure"].is_null());
  EXPECT_EQ((*r0)["reason"], "failure");
  const json e0 = first_unfinished(*r0);
  ASSERT_FALSE(e0.is_null());
  EXPECT_EQ(e0["seq"], (*r1)["recorded"]);  // the first collective rank 1 never issued
  EXPECT_EQ(e0["iteration"], 3);
  EXPECT_TRUE(says_in_order(verdict(dir), {"rank 1 had finished", "rank 0 issued allreduce #" +
                                           std::to_string(e0["seq"].get<int64_t>()), "iteration 3", "Join"}));
  fs::remove_all(dir);
}

// With ZeRO, rank 1 skips its optimizer step 3: rank 0 broadcasts its shard (issuer "zero") where rank 1
// already all-reduces step 4's first bucket.
TEST(FlightScenarios, SkippedZeroStepIsAMismatchBetweenZeroAndABucket) {
  const std::string dir = temp_dir("zero");
  auto r = run_faults(dir, 2, {"--fault", "zero-skip", "--fault-rank", "1", "--fault-step", "3", "--zero"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto r0 = record(dir, 0), r1 = record(dir, 1);
  ASSERT_TRUE(r0 && r1) << r.err;
  const json e0 = first_unfinished(*r0);
  ASSERT_FALSE(e0.is_null());
  const json e1 = entry_with_seq(*r1, e0["seq"].get<int64_t>());
  ASSERT_FALSE(e1.is_null());
  EXPECT_EQ(e0["issuer"], "zero");
  EXPECT_EQ(e0["op"], "broadcast");
  EXPECT_EQ(e1["issuer"], "ddp bucket");
  EXPECT_EQ(e1["iteration"], 4);
  EXPECT_TRUE(says_in_order(verdict(dir), {"#" + std::to_string(e0["seq"].get<int64_t>()), "rank 0", "broadcast",
                                           "zero", "rank 1", "allreduce", "bucket 0"}));
  fs::remove_all(dir);
}

// Rank 1 runs out of data before step 3 and joins (ddp::Join): it shadows rank 0's steps 3 to 5. The
// collectives it records meanwhile carry the iteration they shadow (the one rank 0 records for the same
// sequence number), not its own last step 2.
TEST(FlightScenarios, AJoinedRankRecordsTheIterationItShadows) {
  const std::string dir = temp_dir("join");
  auto r = run_faults(dir, 2, {"--fault", "uneven", "--fault-rank", "1", "--fault-step", "3", "--join"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto r0 = record(dir, 0), r1 = record(dir, 1);
  ASSERT_TRUE(r0 && r1) << r.err;
  int shadows = 0;
  for (const auto& e : (*r1)["entries"]) {
    const json o = entry_with_seq(*r0, e["seq"].get<int64_t>());
    ASSERT_FALSE(o.is_null());
    EXPECT_EQ(e["iteration"], o["iteration"])
        << "seq " << e["seq"] << " issuer " << e["issuer"] << " / " << o["issuer"];
    if (e["issuer"] == "join shadow") {
      ++shadows;
      EXPECT_GE(e["iteration"].get<int64_t>(), 3) << e.dump();
    }
  }
  EXPECT_GT(shadows, 0) << r1->dump();
  fs::remove_all(dir);
}

// A run that succeeds leaves nothing: ddprun's temporary flight folder is removed.
TEST(FlightScenarios, SuccessfulRunRemovesItsTemporaryFlightFolder) {
  const std::string tmp = temp_dir("ok");
  ProcessOptions o;
  o.timeout_s = 90;
  o.set_env = {{"TMPDIR", tmp}};
  o.unset_env = {"DDP_FLIGHT_RECORDER_DIR"};
  auto r = run_process({ddprun_path(), "--standalone", "--nproc-per-node", "2", faults_path(), "--fault", "none"}, o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp)) left.push_back(e.path().filename().string());
  EXPECT_TRUE(left.empty()) << left.front();
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace ddp::testing
