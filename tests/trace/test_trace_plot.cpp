// test_trace_plot.cpp - tools/plot_trace.py draws a real two-rank train trace: on the common clock by default
// (merged file, or the per-rank files put on it by the script), per rank with --align rank, and refuses a bad
// --align by name. Skipped where Debian's python3-matplotlib is missing (tools/ddp bench installs it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_process.h"

namespace {
namespace fs = std::filesystem;
constexpr const char* kPython = "/usr/bin/python3";

bool has_matplotlib() {
  if (!fs::exists(kPython)) return false;
  return ddp::testing::run_process({kPython, "-c", "import matplotlib"}).exit_code == 0;
}

ddp::testing::ProcessResult plot(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kPython, DDP_SOURCE_DIR "/tools/plot_trace.py"};
  argv.insert(argv.end(), args.begin(), args.end());
  ddp::testing::ProcessOptions o;
  o.set_env = {{"PYTHONDONTWRITEBYTECODE", "1"}, {"MPLBACKEND", "Agg"}};
  o.timeout_s = 120;
  return ddp::testing::run_process(argv, o);
}

bool is_png(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return in.gcount() == 8 && std::string(magic + 1, 3) == "PNG" && fs::file_size(p) > 10000;
}

}  // namespace

TEST(TracePlot, DrawsARealTwoRankRunOnTheCommonClockOrPerRank) {
  if (!has_matplotlib()) GTEST_SKIP() << kPython << " has no matplotlib (Debian: python3-matplotlib)";
  const fs::path dir = fs::temp_directory_path() / ("ddp_trace_plot_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::string> argv = {ddp::testing::ddprun_path(), "--standalone", "--nproc-per-node", "2",
                                   DDP_BIN_DIR "/train"};
  std::istringstream flags(
      "--model mlp --data synthetic --hidden 32 --synthetic-samples 64 --batch-size 8 --bucket-cap-mb 0.002 "
      "--first-bucket-mb 0.002 --steps 3 --eval-batches 1 --log-interval 0 --threads 1");
  for (std::string f; flags >> f;) argv.push_back(f);
  argv.insert(argv.end(), {"--trace", (dir / "t.json").string()});
  ddp::testing::ProcessOptions options;
  options.set_env = {{"OPENBLAS_NUM_THREADS", "1"}};
  options.timeout_s = 120;
  const auto run = ddp::testing::run_process(argv, options);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;

  const auto merged = plot({(dir / "t.json").string(), (dir / "common.png").string(), "--iteration", "2"});
  ASSERT_EQ(merged.exit_code, 0) << merged.out << merged.err;
  EXPECT_NE(merged.out.find("iteration 2, ranks [0, 1], common clock"), std::string::npos) << merged.out;
  EXPECT_TRUE(is_png(dir / "common.png"));

  const auto files =
      plot({(dir / "t.rank0.json").string(), (dir / "t.rank1.json").string(), (dir / "files.png").string()});
  ASSERT_EQ(files.exit_code, 0) << files.out << files.err;
  EXPECT_NE(files.out.find("ranks [0, 1], common clock"), std::string::npos) << files.out;
  EXPECT_TRUE(is_png(dir / "files.png"));

  const auto per_rank = plot({(dir / "t.json").string(), (dir / "rank.png").string(), "--align", "rank"});
  ASSERT_EQ(per_rank.exit_code, 0) << per_rank.out << per_rank.err;
  EXPECT_NE(per_rank.out.find("per-rank alignment"), std::string::npos) << per_rank.out;
  EXPECT_TRUE(is_png(dir / "rank.png"));

  const auto bad = plot({(dir / "t.json").string(), (dir / "bad.png").string(), "--align", "wall"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--align wall: give 'common'"), std::string::npos) << bad.err;
  const auto not_a_number =
      plot({(dir / "t.json").string(), (dir / "bad.png").string(), "--iteration", "two"});
  EXPECT_NE(not_a_number.exit_code, 0);
  EXPECT_NE(not_a_number.err.find("--iteration two: give an iteration number"), std::string::npos)
      << not_a_number.err;
  const auto no_value = plot({(dir / "t.json").string(), (dir / "bad.png").string(), "--align"});
  EXPECT_NE(no_value.exit_code, 0);
  EXPECT_NE(no_value.err.find("--align needs a value"), std::string::npos) << no_value.err;
  const auto missing = plot({(dir / "t.json").string(), (dir / "bad.png").string(), "--iteration", "99"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("no iteration 99; the trace has iterations 1..3"), std::string::npos)
      << missing.err;
  fs::remove_all(dir);
}
