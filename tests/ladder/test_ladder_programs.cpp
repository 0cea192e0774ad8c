// test_ladder_programs.cpp - the five ladder programs (bin/ladder_rung*, examples/ladder) run alone (a world
// of one, no launcher) and under ddprun with two ranks, print their summary, and write the --json record
// tools/bench_ladder.py reads, with the all-reduces and bytes per step each rung's idea says; bad flags are
// usage errors naming the flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/run_process.h"

using namespace ddp::testing;

namespace {

const char* const kPrograms[] = {"ladder_rung1_each", "ladder_rung2_flat", "ladder_rung3_hooks",
                                 "ladder_rung4_buckets", "ladder_rung5_ddp"};
std::string path_of(const std::string& program) { return std::string(DDP_BIN_DIR) + "/" + program; }

// A tiny MLP 6-8-3: parameters 8x6, 8, 3x8, 3 (83 float32, 332 bytes). A 104-byte cap gives rung 4 and 5 two
// buckets: {3, 3x8} (108 bytes) and {8, 8x6}.
std::vector<std::string> tiny_flags() {
  return {"--steps",     "3",
          "--warmup",    "2",
          "--batch",     "4",
          "--features",  "6",
          "--hidden",    "8",
          "--classes",   "3",
          "--bucket-mb", std::to_string(104.0 / (1024 * 1024))};
}
const int64_t kAllReducesPerStep[] = {4, 1, 4, 2, 2};

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "ladder_test_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST(LadderPrograms, EachRunsAloneAsAWorldOfOne) {
  for (const char* program : kPrograms) {
    std::vector<std::string> argv = {path_of(program)};
    for (auto& f : tiny_flags()) argv.push_back(f);
    ProcessOptions po;
    po.timeout_s = 60;
    ProcessResult r = run_process(argv, po);
    ASSERT_FALSE(r.timed_out) << program;
    EXPECT_EQ(r.exit_code, 0) << program << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(std::string(program) + ": world 1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("all-reduce(s) per step"), std::string::npos) << r.out;
  }
}

TEST(LadderPrograms, EachRunsUnderDdprunWithTwoRanksAndWritesItsRecord) {
  TempDir dir;
  for (size_t i = 0; i < std::size(kPrograms); ++i) {
    const std::string json = (dir.path / (std::string(kPrograms[i]) + ".json")).string();
    std::vector<std::string> argv = {ddprun_path(), "--standalone", "--nproc-per-node", "2",
                                     path_of(kPrograms[i])};
    for (auto& f : tiny_flags()) argv.push_back(f);
    argv.push_back("--json");
    argv.push_back(json);
    ProcessOptions po;
    po.timeout_s = 120;
    po.set_env["DDP_COLLECTIVE_TIMEOUT_S"] = "30";
    ProcessResult r = run_process(argv, po);
    ASSERT_FALSE(r.timed_out) << kPrograms[i];
    ASSERT_EQ(r.exit_code, 0) << kPrograms[i] << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(std::string(kPrograms[i]) + ": world 2"), std::string::npos) << r.out;
    std::ifstream in(json);
    ASSERT_TRUE(in) << "no --json record at " << json << "\n" << r.out << r.err;
    const nlohmann::json rec = nlohmann::json::parse(in);
    EXPECT_EQ(rec["program"], kPrograms[i]);
    EXPECT_EQ(rec["world"], 2);
    EXPECT_EQ(rec["parameters"], 83);
    ASSERT_EQ(rec["step_ms"].size(), 3u);
    ASSERT_EQ(rec["exposed_ms"].size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_GT(rec["step_ms"][s].get<double>(), 0.0);
      EXPECT_GE(rec["exposed_ms"][s].get<double>(), 0.0);
      EXPECT_EQ(rec["collectives"][s], kAllReducesPerStep[i]) << kPrograms[i] << " step " << s;
      EXPECT_EQ(rec["bytes"][s], 332) << kPrograms[i] << " step " << s;
    }
  }
}

TEST(LadderPrograms, BadFlagsAreUsageErrorsNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--hidden", "0"}, "--hidden expects comma-separated positive layer widths"},
      {{"--hidden", "8,,8"}, "--hidden expects"},
      {{"--bucket-mb", "0"}, "--bucket-mb must be > 0"},
      {{"--steps", "0"}, "--steps must be >= 1"},
  };
  for (auto& [flags, want] : cases) {
    std::vector<std::string> argv = {path_of("ladder_rung4_buckets")};
    for (auto& f : flags) argv.push_back(f);
    ProcessOptions po;
    po.timeout_s = 30;
    ProcessResult r = run_process(argv, po);
    EXPECT_EQ(r.exit_code, 2) << flags[0] << " " << flags[1] << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  }
}
