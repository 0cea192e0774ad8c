// test_ddp_flight_cli.cpp - the ddp_flight program (tools/ddp_flight.cpp) run as a process on dump folders
// written by the test: its first line is the analysis's headline for each kind of divergence, then the table
// and the divergences; --last, --group and --chrome; exit 0 when it analysed, 2 with a message naming the fix
// on bad input or a bad command line. With DDP_FLIGHT_EXAMPLES=<folder> the scenarios' folders are kept there
// (the worked examples in docs/debugging.md are this program's output on them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/distributed/flight_analysis.h"
#include "runtime/distributed/flight_dump_reader.h"
#include "tests/support/run_process.h"
#include "tests/tools/flight_dump_builder.h"

namespace {

using namespace ddp::testing::flight;
namespace fl = ddp::dist::flight;
namespace fs = std::filesystem;

std::string tool() { return std::string(DDP_BIN_DIR) + "/ddp_flight"; }

// A folder for one scenario: under DDP_FLIGHT_EXAMPLES (kept) or the temp folder (removed by the caller).
std::string scenario_dir(const std::string& name) {
  const char* keep = std::getenv("DDP_FLIGHT_EXAMPLES");
  fs::path p = keep && *keep ? fs::path(keep) / name
                             : fs::temp_directory_path() /
                                   ("ddp_flight_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}
void remove_unless_kept(const std::string& dir) {
  const char* keep = std::getenv("DDP_FLIGHT_EXAMPLES");
  if (!(keep && *keep)) fs::remove_all(dir);
}

ddp::testing::ProcessResult run(std::vector<std::string> args) {
  args.insert(args.begin(), tool());
  ddp::testing::ProcessOptions o;
  o.timeout_s = 60;
  o.unset_env = {"DDP_DEBUG"};
  return ddp::testing::run_process(args, o);
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One dump folder per kind of divergence, named as in docs/debugging.md's worked examples.
struct Case {
  const char* name;
  Files files;
  const char* starts;  // the first line's beginning
};
std::vector<Case> example_cases() {
  return {
      {"missing_issue", missing_issue_scenario(), "rank 1 never issued allreduce #4812 (bucket 3: "},
      {"mismatch", mismatch_scenario(), "at collective #57 the ranks disagree on the count: rank 2 issued "},
      {"uneven_steps", uneven_steps_scenario(), "rank 1 had finished after #99 (its group was destroyed)"},
      {"rank_ahead", rank_ahead_scenario(), "rank 1 never issued allreduce #40 "},
      {"older_dump", older_dump_scenario(),
       "rank 2's record ends at #49, 10 collectives before ranks 0 and 1's"},
      {"partial_completion", partial_completion_scenario(), "allreduce #20 (bucket 0: "},
      {"no_dump", no_dump_scenario(), "rank 3 left no dump"},
      {"no_overlap", no_overlap_scenario(),
       "rank 0's ring starts at #300, after rank 1's record ends at #99"},
      {"nothing", nothing_scenario(4, 4813), "every rank completed everything up to allreduce #4812"},
      {"hier_inner", hier_scenario(true, false), "in group pg0/host1: rank 1 (global rank 3) never issued"},
      {"nothing_world1", nothing_scenario(1, 7), "the only rank (world 1) completed everything up to"},
      {"cross_group", cross_group_wait_scenario(), "the ranks wait on each other across two groups"},
  };
}

}  // namespace

// For every kind: the program's first line is the library's headline, and the worked sentence of the kind.
TEST(DdpFlightCli, FirstLineIsTheSentenceOfEachKind) {
  const std::vector<Case> cases = example_cases();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = scenario_dir(c.name);
    write_files(dir, c.files);
    const auto r = run({dir});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const std::string expected = fl::analyze_flight(fl::load_flight_dumps({dir})).headline;
    EXPECT_EQ(first_line(r.out), expected);
    EXPECT_EQ(first_line(r.out).rfind(c.starts, 0), 0u) << r.out;
    EXPECT_NE(r.out.find("\ngroup pg0 ("), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\ndivergences:\n  - "), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "");
    remove_unless_kept(dir);
  }
}

TEST(DdpFlightCli, LastGroupAndFilesInsteadOfAFolder) {
  const std::string dir = scenario_dir("options");
  write_files(dir, missing_issue_scenario());
  // --last 3: three rows after the header, the divergence last.
  auto r = run({"--last", "3", dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\n  4810  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n> 4812  "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n  4809  "), std::string::npos) << r.out;
  // Files: without rank 1's file its rank left no dump.
  r = run({dir + "/flight.rank0.json", dir + "/flight.rank2.json", dir + "/flight.rank3.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(first_line(r.out).rfind("rank 1 left no dump", 0), 0u) << r.out;
  // --group: a name not in the dumps is an input error listing the names there are.
  r = run({"--group", "pg7", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(
      r.err.find("ddp_flight: no record of group 'pg7' in the dumps; they hold pg0: pick one of those with "
                 "--group"),
      std::string::npos)
      << r.err;
  r = run({"--group", "pg0", dir});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  fs::remove_all(dir);
}

TEST(DdpFlightCli, ChromeTraceIsWrittenAndWellFormed) {
  const std::string dir = scenario_dir("chrome");
  write_files(dir, uneven_steps_scenario());
  const std::string out = dir + "/../ddp_flight_cli_chrome_" + std::to_string(::getpid()) + ".trace";
  auto r = run({"--chrome", out, dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Chrome trace: " + out), std::string::npos) << r.out;
  const nlohmann::json trace = nlohmann::json::parse(read(out));
  size_t events = 0;
  for (const auto& e : trace["traceEvents"]) events += e["ph"] == "X";
  EXPECT_EQ(events, 101u + 100u);
  fs::remove(out);
  r = run({"--chrome", dir + "/no/such/folder/t.json", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot write the Chrome trace"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(DdpFlightCli, BadInputAndUsageExitWithTwoAndSayTheFix) {
  const std::string dir = scenario_dir("bad");
  auto r = run({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("ddp_flight: give the dump folder or its json files"), std::string::npos) << r.err;
  r = run({"--lats", "3", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--last"), std::string::npos) << r.err;
  r = run({"--last", "0", dir});
  EXPECT_EQ(r.exit_code, 2);
  r = run({dir});  // an empty folder
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("holds no *.json file"), std::string::npos) << r.err;
  {
    std::ofstream f(dir + "/flight.rank0.json");
    f << "{\"version\": 2,";
  }
  r = run({dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("ddp_flight: " + dir + "/flight.rank0.json is not JSON"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << "no source locations for users: " << r.err;
  // Two runs mixed: the same rank from two processes.
  Files two = nothing_scenario(2, 5);
  two[1].second["pid"] = 99;
  two[1].second["rank"] = 0;
  two[1].first = "flight.rank0.again.json";
  fs::remove(dir + "/flight.rank0.json");
  write_files(dir, two);
  r = run({dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("come from different processes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("flight.rank0.again.json"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

// A damaged record whose world_size is 2000000000 (issue 36: std::bad_alloc, exit 134), or whose recorded
// count is 2^62 (the analysis walked every sequence number up to it): exit 2 with the file, the field and
// the fix, at once, whatever else goes wrong inside (any exception is a named error, never an abort).
TEST(DdpFlightCli, HugeWorldOrCountIsANamedErrorNotACrash) {
  const std::string dir = scenario_dir("huge");
  Files files = nothing_scenario(2, 5);
  files[0].second["world_size"] = 2000000000;
  files[1].second["world_size"] = 2000000000;
  write_files(dir, files);
  auto r = run({dir});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("world_size 2000000000"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("flight.rank0.json"), std::string::npos) << r.err;
  files = nothing_scenario(2, 5);
  files[1].second["recorded"] = int64_t{1} << 62;
  write_files(dir, files);
  const auto t0 = std::chrono::steady_clock::now();
  r = run({dir});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 2) << r.exit_code << r.err;
  EXPECT_LT(r.out.size() + r.err.size(), 100000u);
  fs::remove_all(dir);
}

// A failure message quoted from a record loses its "file.cpp:123: " source locations, as every error a
// program prints does (DDP_DEBUG=INFO keeps them).
TEST(DdpFlightCli, QuotedFailuresLoseTheirSourceLocations) {
  const std::string dir = scenario_dir("locations");
  Files files = partial_completion_scenario();
  files[1].second["failure"] =
      "/work/main/runtime/distributed/gloo_group.cpp:321: gloo: connection reset by peer";
  write_files(dir, files);
  const auto r = run({dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(first_line(r.out).find("rank 1's error: gloo: connection reset by peer"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("gloo_group.cpp:321"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// docs/debugging.md's worked examples are this program's output: every line of each example block (but the
// last, a real ddprun run) is a line of `ddp_flight --last 4 <case>` run beside the case folders.
TEST(DdpFlightCli, DocsWorkedExamplesAreTheProgramsOutput) {
  const std::string root = scenario_dir("docs_examples");
  std::set<std::string> lines;
  for (const Case& c : example_cases()) {
    fs::create_directories(root + "/" + c.name);
    write_files(root + "/" + c.name, c.files);
    const auto r = ddp::testing::run_process(
        {"/bin/bash", "-c", "cd \"$0\" && exec \"$1\" --last 4 \"$2\"", root, tool(), c.name});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) lines.insert(line);
  }
  const std::string doc = read(std::string(DDP_SOURCE_DIR) + "/docs/debugging.md");
  const size_t begin = doc.find("#### Worked examples");
  ASSERT_NE(begin, std::string::npos) << "docs/debugging.md lost its worked examples";
  const size_t end = doc.find("\n## ", begin);
  const std::string section = doc.substr(begin, end - begin);
  std::vector<std::string> blocks;
  for (size_t at = section.find("\n```\n"); at != std::string::npos;) {
    const size_t close = section.find("\n```\n", at + 5);
    if (close == std::string::npos) break;
    blocks.push_back(section.substr(at + 5, close - at - 5 + 1));
    at = section.find("\n```\n", close + 5);
  }
  ASSERT_GE(blocks.size(), 10u);
  blocks.pop_back();  // the real run
  for (const std::string& block : blocks) {
    std::istringstream in(block);
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line != "...")
        EXPECT_TRUE(lines.count(line)) << "docs/debugging.md shows a line ddp_flight does not print:\n"
                                       << line;
  }
  fs::remove_all(root);
}
