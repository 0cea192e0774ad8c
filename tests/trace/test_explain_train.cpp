// test_explain_train.cpp - `train --explain N` on real two-rank runs: the account of step N appears once,
// from rank 0, with every rank's buckets; its in-flight times are the trace's bucket events of the same step
// (one source of truth: both come from the reducer's bucket records); parameters without a gradient are named
// (branchy); a rank that ran out of data shadows the step (Join) and nothing hangs; DDP_EXPLAIN does the same
// for another program (bench_e2e) and a bad value is refused by name; under ZeRO-2/3 the what-if models
// reduce-scatters, and at ZeRO-3 (one bucket per unit, the cap does not apply) it offers no other cap.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_process.h"

namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

ddp::testing::ProcessResult two_ranks(const std::string& program, const std::string& flags,
                                      std::vector<std::pair<std::string, std::string>> env = {}) {
  std::vector<std::string> argv = {ddp::testing::ddprun_path(), "--standalone", "--nproc-per-node", "2",
                                   std::string(DDP_BIN_DIR) + "/" + program};
  std::istringstream in(flags);
  for (std::string f; in >> f;) argv.push_back(f);
  ddp::testing::ProcessOptions o;
  o.set_env = {{"OPENBLAS_NUM_THREADS", "1"}};
  for (auto& e : env) o.set_env[e.first] = e.second;
  o.unset_env = {"DDP_EXPLAIN", "DDP_DEBUG"};
  o.timeout_s = 120;
  return ddp::testing::run_process(argv, o);
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

const char* kMlp =
    "--model mlp --data synthetic --hidden 64 --synthetic-samples 128 --batch-size 8 --bucket-cap-mb 0.002 "
    "--first-bucket-mb 0.002 --eval-batches 1 --log-interval 0 --threads 1";

}  // namespace

TEST(ExplainTrain, TheAccountOfAStepMatchesTheTraceOfThatStep) {
  const fs::path dir = fs::temp_directory_path() / ("ddp_explain_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = (dir / "t.json").string();
  const auto r = two_ranks("train", std::string(kMlp) + " --steps 3 --explain 2 --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "explain step "), 1u) << r.out;
  EXPECT_EQ(count(r.out, "[rank 0] explain step 2: 2 ranks, "), 1u) << r.out;
  EXPECT_EQ(count(r.out, "[rank 1] explain"), 0u) << "rank 0 prints for everyone";
  EXPECT_NE(r.out.find("unused parameters: none"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("what-if"), std::string::npos) << r.out;

  // "(X ms in flight)" of rank r's bucket k against the trace's "allreduce bucket k" of rank r in
  // iteration 2.
  std::map<std::pair<int, int>, double> explained;  // (rank, bucket) -> ms
  int rank = -1;
  const std::regex rank_re(R"(\[rank 0\] rank (\d+): forward ended)");
  const std::regex bucket_re(R"(\[rank 0\]   bucket (\d+): .* \(([0-9.]+) ms in flight)");
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, rank_re))
      rank = std::stoi(m[1]);
    else if (std::regex_search(line, m, bucket_re) && rank >= 0)
      explained[{rank, std::stoi(m[1])}] = std::stod(m[2]);
  }
  const json doc = json::parse(std::ifstream(trace));
  std::map<int, std::pair<double, double>> window;
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "iteration" && e["args"]["iteration"] == 2)
      window[e["pid"].get<int>()] = {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
  std::map<std::pair<int, int>, double> traced;
  for (const json& e : doc["traceEvents"]) {
    if (e.value("cat", "") != "comm") continue;
    const int pid = e["pid"];
    const double ts = e["ts"];
    if (window.count(pid) && ts >= window[pid].first && ts < window[pid].second)
      traced[{pid, e["args"]["bucket"].get<int>()}] = e["dur"].get<double>() / 1000.0;
  }
  ASSERT_GE(traced.size(), 4u) << "several buckets on both ranks";
  ASSERT_EQ(explained.size(), traced.size()) << r.out;
  for (const auto& [key, ms] : traced)
    EXPECT_NEAR(explained[key], ms, 0.0015) << "rank " << key.first << " bucket " << key.second;
  fs::remove_all(dir);
}

// The header's bucket count ("explain step 2: 2 ranks, N buckets"), -1 when absent.
int explained_buckets(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(explain step 2: 2 ranks, (\d+) buckets?)"))) return -1;
  return std::stoi(m[1]);
}

TEST(ExplainTrain, UnderZeroTheWhatIfModelsReduceScattersAndZero3OffersNoCap) {
  // ZeRO-3: the buckets are the units (mlp: its 3 linear layers); --bucket-cap-mb does not shape them, so no
  // "cap X MiB" row may be offered, least of all one with another bucket count marked as this run.
  const auto z3 = two_ranks("train", std::string(kMlp) + " --steps 3 --explain 2 --zero 3");
  ASSERT_EQ(z3.exit_code, 0) << z3.out << z3.err;
  const int units = explained_buckets(z3.out);
  EXPECT_EQ(units, 3) << z3.out;
  EXPECT_NE(z3.out.find("the buckets are the given layout (ZeRO-3: one per unit)"), std::string::npos)
      << z3.out;
  EXPECT_EQ(z3.out.find(" MiB: "), std::string::npos) << "no cap what-if at ZeRO-3\n" << z3.out;
  EXPECT_EQ(z3.out.find("<- best"), std::string::npos) << z3.out;
  EXPECT_NE(z3.out.find("  this run: " + std::to_string(units) + " buckets, exposed "), std::string::npos)
      << z3.out;
  EXPECT_NE(z3.out.find("this step's reduce-scatters"), std::string::npos) << z3.out;
  EXPECT_EQ(z3.out.find("all-reduce"), std::string::npos) << "ZeRO-3 runs no gradient all-reduce\n" << z3.out;

  // ZeRO-2: the cap does shape the buckets; the what-if's row of this run has this run's bucket count, and
  // the collective it fits and simulates is the reduce-scatter.
  const auto z2 = two_ranks("train", std::string(kMlp) + " --steps 3 --explain 2 --zero 2");
  ASSERT_EQ(z2.exit_code, 0) << z2.out << z2.err;
  const int buckets = explained_buckets(z2.out);
  ASSERT_GT(buckets, 0) << z2.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(z2.out, m, std::regex(R"(MiB: +(\d+) buckets?, [^\n]*\(this run\))")))
      << z2.out;
  EXPECT_EQ(std::stoi(m[1]), buckets) << z2.out;
  EXPECT_NE(z2.out.find("this step's reduce-scatters"), std::string::npos) << z2.out;
  EXPECT_EQ(z2.out.find("all-reduce"), std::string::npos) << z2.out;
}

TEST(ExplainTrain, NamesTheParametersWithoutAGradientAndSurvivesAJoinShadow) {
  const auto branchy =
      two_ranks("train",
                "--model branchy --find-unused-parameters --steps 3 --batch-size 8 "
                "--synthetic-samples 64 --eval-batches 1 --log-interval 0 --threads 1 --explain 2");
  ASSERT_EQ(branchy.exit_code, 0) << branchy.out << branchy.err;
  EXPECT_NE(branchy.out.find("no gradient on this rank (all-reduced as zeros):"), std::string::npos)
      << branchy.out;
  EXPECT_NE(branchy.out.find("unused parameters (no gradient on any rank):"), std::string::npos)
      << branchy.out;

  // Rank 1 has one step fewer; at the last step it shadows rank 0 (Join). Explaining that step must not hang.
  const auto uneven =
      two_ranks("train", std::string(kMlp) + " --steps 4 --uneven-steps 1 --join --explain 4");
  ASSERT_EQ(uneven.exit_code, 0) << uneven.out << uneven.err;
  EXPECT_NE(uneven.out.find("explain step 4: 2 ranks"), std::string::npos) << uneven.out;
  EXPECT_NE(uneven.out.find("rank 1: had no batch (Join)"), std::string::npos) << uneven.out;
}

TEST(ExplainTrain, DdpExplainWorksForAnyProgramAndABadValueIsRefused) {
  const auto bench = two_ranks("bench_e2e", "--warmup 1 --steps 2", {{"DDP_EXPLAIN", "2"}});
  ASSERT_EQ(bench.exit_code, 0) << bench.out << bench.err;
  EXPECT_EQ(count(bench.out, "explain iteration 2: 2 ranks"), 1u) << bench.out;
  const auto bad = two_ranks("train", std::string(kMlp) + " --steps 1", {{"DDP_EXPLAIN", "soon"}});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE((bad.out + bad.err).find("DDP_EXPLAIN='soon' is not valid"), std::string::npos)
      << bad.out << bad.err;
}

TEST(ExplainTrain, DdpDebugDetailGivesEachBucketsTimesAndNamesTheParametersWithoutAGradient) {
  std::vector<std::string> argv = {std::string(DDP_BIN_DIR) + "/train",
                                   "--model",
                                   "branchy",
                                   "--find-unused-parameters",
                                   "--steps",
                                   "2",
                                   "--batch-size",
                                   "8",
                                   "--synthetic-samples",
                                   "64",
                                   "--eval-batches",
                                   "1",
                                   "--log-interval",
                                   "0",
                                   "--threads",
                                   "1"};
  ddp::testing::ProcessOptions o;
  o.set_env = {{"OPENBLAS_NUM_THREADS", "1"}, {"DDP_DEBUG", "DETAIL"}};
  o.unset_env = {"DDP_EXPLAIN", "LOCAL_RANK", "RANK", "WORLD_SIZE"};
  o.timeout_s = 120;
  const auto r = ddp::testing::run_process(argv, o);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* step : {"step 1", "step 2"}) {
    const size_t at = r.err.find(std::string("DETAIL: ") + step + " buckets:\n  bucket 0 (10 params, ");
    ASSERT_NE(at, std::string::npos) << step << "\n" << r.err;
    const std::string rest = r.err.substr(at, 400);
    EXPECT_NE(rest.find(" ms after forward\n  no gradient on this rank: "), std::string::npos) << rest;
    EXPECT_NE(rest.find("never_used.weight never_used.bias\n"), std::string::npos) << rest;
  }
}
