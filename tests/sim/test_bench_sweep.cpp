// test_bench_sweep.cpp - tools/sweep.sh (`tools/ddp bench --sweep`) in its quick mode (2 caps, 1 round, a few
// steps: seconds): it calibrates the simulator from a bench_allreduce run of the backend in use, caches the
// calibration under the cache folder and reuses it on the next run, and writes a well-formed table per
// configuration (every point a row with numbers in every measured cell, the best caps stated) and one PNG per
// configuration, with no text past its canvas (tools/sweep_report.py checks every title, legend and label and
// fails otherwise). Shapes and files only: no timing value is checked. Bad settings are refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_process.h"

namespace {
namespace fs = std::filesystem;
using ddp::testing::ProcessResult;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ddp_sweep_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

bool has_python_module(const char* module) {
  if (!fs::exists("/usr/bin/python3")) return false;
  return ddp::testing::run_process({"/usr/bin/python3", "-c", std::string("import ") + module}).exit_code == 0;
}

ProcessResult sweep(const fs::path& out, const fs::path& cache, std::map<std::string, std::string> env = {}) {
  ddp::testing::ProcessOptions o;
  o.set_env = {{"SWEEP_OUT", out.string()}, {"DDP_CALIBRATION_DIR", cache.string()}, {"MPLBACKEND", "Agg"},
               {"PYTHONDONTWRITEBYTECODE", "1"}, {"DDP_SHM", "1"}};
  for (auto& [k, v] : env) o.set_env[k] = v;
  o.timeout_s = 240;
  return ddp::testing::run_process({"/bin/bash", DDP_SOURCE_DIR "/tools/sweep.sh", DDP_BUILD_DIR, "--quick"}, o);
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> cells(const std::string& row) {  // "| a | b |" -> {"a", "b"}
  std::vector<std::string> out;
  std::stringstream ss(row.substr(1));
  std::string c;
  while (std::getline(ss, c, '|')) {
    const auto b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
    out.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
  }
  return out;
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool is_range(const std::string& s) {  // "1.23-4.56"
  const auto dash = s.find('-', 1);
  return dash != std::string::npos && is_number(s.substr(0, dash)) && is_number(s.substr(dash + 1));
}

// A PNG of at least w x h pixels (the IHDR chunk's width and height, big-endian).
bool is_png_of_size(const fs::path& p, unsigned w, unsigned h) {
  std::ifstream in(p, std::ios::binary);
  unsigned char b[24] = {};
  in.read(reinterpret_cast<char*>(b), 24);
  if (in.gcount() != 24 || b[1] != 'P' || b[2] != 'N' || b[3] != 'G') return false;
  const unsigned width = (b[16] << 24) | (b[17] << 16) | (b[18] << 8) | b[19];
  const unsigned height = (b[20] << 24) | (b[21] << 16) | (b[22] << 8) | b[23];
  return width >= w && height >= h;
}

TEST(BenchSweep, QuickRunCalibratesCachesAndWritesATablePerConfigAndPlots) {
  if (!has_python_module("json")) GTEST_SKIP() << "no /usr/bin/python3 (apt-get install python3)";
  const bool plots = has_python_module("matplotlib");
  TempDir dir;
  const fs::path out = dir.path / "sweep", cache = dir.path / "cache";
  auto r = sweep(out, cache);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The calibration: measured (nothing cached yet) into the cache folder, named, its fit stated.
  EXPECT_NE(r.out.find("sweep: calibration: measured " + cache.string() + "/allreduce-"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sweep: calibration fit: ring, alpha "), std::string::npos) << r.out;
  std::vector<fs::path> cached;
  for (auto& e : fs::directory_iterator(cache)) cached.push_back(e.path());
  ASSERT_EQ(cached.size(), 1u);
  EXPECT_EQ(cached[0].filename().string().rfind("allreduce-shm-", 0), 0u) << cached[0];
  EXPECT_EQ(cached[0].extension(), ".json");

  const std::string table = read(out / "sweep-table.md");
  ASSERT_FALSE(table.empty()) << r.out;
  EXPECT_NE(table.find("Calibration: " + cached[0].string() + " (bench_allreduce, backend shm, world 2): ring"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("Machine: "), std::string::npos) << table;
  EXPECT_NE(table.find("load before "), std::string::npos) << table;
  // One table per configuration, a row per point: caps 1 and 25, first bucket 4, overlap off, world 2 nosync,
  // world 1 ddp and nosync.
  for (const std::string config : {"gpt", "mlp"}) {
    const auto at = table.find("### " + config + ":");
    ASSERT_NE(at, std::string::npos) << table;
    std::stringstream ss(table.substr(at));
    std::string line;
    std::vector<std::vector<std::string>> rows;
    std::string best_line;
    std::getline(ss, line);
    while (std::getline(ss, line)) {
      if (line.rfind("### ", 0) == 0) break;
      if (line.rfind("| setting", 0) == 0 || line.rfind("|---", 0) == 0) continue;
      if (line.rfind("| ", 0) == 0) rows.push_back(cells(line));
      if (line.rfind("Measured best cap: ", 0) == 0) best_line = line;
    }
    ASSERT_EQ(rows.size(), 7u) << config << "\n" << table;
    const std::vector<std::string> settings = {"cap 1 MiB",
                                               "cap 25 MiB",
                                               "first bucket 4 MiB, cap 25 MiB",
                                               "overlap off (nooverlap), cap 25 MiB",
                                               "world 2, no communication (nosync)",
                                               "world 1, ddp, cap 25 MiB",
                                               "world 1, no communication (nosync)"};
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& c = rows[i];
      ASSERT_EQ(c.size(), 10u) << table;
      EXPECT_EQ(c[0], settings[i]) << table;
      const bool nosync = c[0].find("nosync") != std::string::npos;
      if (!nosync) EXPECT_TRUE(is_number(c[1]) && std::stoi(c[1]) >= 1) << "buckets: " << c[1];
      EXPECT_EQ(c[2], "1") << "runs";
      EXPECT_TRUE(is_number(c[3])) << "measured: " << c[3];
      EXPECT_TRUE(is_range(c[4])) << "p10-p90: " << c[4];
      EXPECT_TRUE(is_range(c[5])) << "rounds: " << c[5];
      if (nosync) {
        EXPECT_EQ(c[6], "input") << "the nosync runs are the simulator's compute times";
      } else {
        EXPECT_TRUE(is_number(c[6])) << c[0] << " predicted: " << c[6];
        EXPECT_TRUE(is_number(c[7])) << c[0] << " error: " << c[7];
      }
    }
    EXPECT_NE(best_line.find("Predicted best cap (bench_allreduce calibration): "), std::string::npos) << best_line;
    EXPECT_NE(best_line.find("one sweep step of the measured best"), std::string::npos) << best_line;
    if (plots) EXPECT_TRUE(is_png_of_size(out / ("sweep-" + config + ".png"), 600, 400)) << config;
  }
  EXPECT_TRUE(fs::exists(out / "sweep.json"));
  EXPECT_NE(read(out / "simulator.txt").find("bucket simulator validation"), std::string::npos);
  if (!plots) std::printf("note: python3-matplotlib is missing; the PNGs were not checked\n");

  // A second run reuses the cached calibration and says so (one configuration, one cap: a few seconds).
  auto again = sweep(dir.path / "again", cache,
                     {{"SWEEP_CONFIGS", "mlp"}, {"SWEEP_CAPS", "25"}, {"SWEEP_FIRST_CAPS", ""}});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("sweep: calibration: reusing " + cached[0].string()), std::string::npos) << again.out;
  EXPECT_NE(read(dir.path / "again" / "sweep-table.md").find("### mlp:"), std::string::npos);
}

TEST(BenchSweep, BadSettingsAreRefusedByName) {
  TempDir dir;
  struct Case {
    std::map<std::string, std::string> env;
    std::string phrase;
  };
  for (const Case& c : {Case{{{"SWEEP_CONFIGS", "mlp gpt2s"}}, "SWEEP_CONFIGS item 'gpt2s'"},
                        Case{{{"SWEEP_ROUNDS", "0"}}, "SWEEP_ROUNDS='0' must be a positive integer"},
                        Case{{{"SWEEP_STEPS_GPT", "-1"}}, "SWEEP_STEPS_GPT='-1' must be a positive integer"},
                        Case{{{"SWEEP_CAPS", " "}}, "SWEEP_CAPS is empty"},
                        Case{{{"SWEEP_CAPS", "1 25MB"}}, "cap '25MB' (SWEEP_CAPS / SWEEP_FIRST_CAPS) is not a positive"},
                        Case{{{"SWEEP_FIRST_CAPS", "0"}}, "cap '0' (SWEEP_CAPS / SWEEP_FIRST_CAPS) is not a positive"}}) {
    auto r = sweep(dir.path / "out", dir.path / "cache", c.env);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(c.phrase), std::string::npos) << r.err;
  }
  auto usage = ddp::testing::run_process({"/bin/bash", DDP_SOURCE_DIR "/tools/sweep.sh", DDP_BUILD_DIR, "--fast"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("usage: tools/sweep.sh BUILD_DIR [--quick]"), std::string::npos) << usage.err;
}

}  // namespace
