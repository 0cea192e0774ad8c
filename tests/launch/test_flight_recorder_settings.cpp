// test_flight_recorder_settings.cpp - ddprun under every flight recorder setting, from one table: the
// recorder off (DDP_FLIGHT_RECORDER_ENTRIES=0), the default ring, huge rings full of entries (a dump takes a
// while), two groups (a second group "gather" as ZeRO-3's, its record flight.rank<R>.gather.json) and two
// groups with huge rings - each with a rank SIGKILLed and with a rank SIGSTOPped (the stall watchdog), world
// 2, rank 1 at fault (tests/progs/flight_faults.cpp). Every case checks ddprun's exit code (the signal's
// 128+9 for a kill, 124 for a stall), the rank its summary blames, that no surviving rank died of ddprun's
// SIGUSR1, and that every group of every surviving rank left a record (none with the recorder off), which
// ddp_flight then reads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/support/run_process.h"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;

struct Setting {
  const char* name;
  const char* entries;  // DDP_FLIGHT_RECORDER_ENTRIES, nullptr: unset (default 2000)
  int groups;
  int fill;  // one-element all-reduces per group before training
};
struct Fault {
  const char* name;  // flight_faults' --fault
  int exit_code;     // ddprun's
};

const Setting kSettings[] = {
    {"off", "0", 1, 0},
    {"default", nullptr, 1, 0},
    {"huge_rings", "1000000", 1, 2000},
    {"two_groups", nullptr, 2, 0},
    {"two_groups_huge_rings", "1000000", 2, 2000},
};
const Fault kFaults[] = {{"kill", 128 + 9}, {"stop", 124}};

struct Case {
  Setting setting;
  Fault fault;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.setting.name << "/" << c.fault.name; }
std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const Setting& s : kSettings)
    for (const Fault& f : kFaults) out.push_back({s, f});
  return out;
}

std::string file_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class RecorderSettings : public ::testing::TestWithParam<Case> {};

TEST_P(RecorderSettings, RightExitRightRankEveryGroupsRecord) {
  const Case& c = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("ddp_recset_" + std::string(c.setting.name) + "_" +
                                                    c.fault.name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ProcessOptions o;
  o.timeout_s = 60;
  o.unset_env = {"DDP_FLIGHT_RECORDER_DIR", "DDP_FLIGHT_RECORDER_ENTRIES", "DDP_COLLECTIVE_TIMEOUT_S"};
  if (c.setting.entries) o.set_env["DDP_FLIGHT_RECORDER_ENTRIES"] = c.setting.entries;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_process({ddprun_path(),
                        "--standalone",
                        "--nproc-per-node",
                        "2",
                        "--stall-timeout",
                        "1",
                        "--grace-period",
                        "1",
                        "--flight-dir",
                        dir.string(),
                        std::string(DDP_BIN_DIR) + "/testprog_flight_faults",
                        "--fault",
                        c.fault.name,
                        "--fault-rank",
                        "1",
                        "--fault-step",
                        "3",
                        "--groups",
                        std::to_string(c.setting.groups),
                        "--fill",
                        std::to_string(c.setting.fill)},
                       o);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("seconds", std::to_string(took));
  const std::string& err = r.err;
  EXPECT_EQ(r.exit_code, c.fault.exit_code) << err;
  // Rank 0 survived until ddprun stopped it: it must not have died of ddprun's SIGUSR1 (signal 10).
  EXPECT_EQ(err.find("SIGUSR1"), std::string::npos) << err;
  if (std::string(c.fault.name) == "kill") {
    // Rank 0 is stopped by ddprun, or - when its shm collective saw the dead peer first - fails on its own
    // (exit code 1, after writing a failure record): either way rank 1 is the root cause.
    EXPECT_TRUE(err.find("1 of 2 workers failed") != std::string::npos ||
                (err.find("2 of 2 workers failed") != std::string::npos &&
                 err.find("exit code 1 ") != std::string::npos))
        << err;
    EXPECT_NE(err.find("root cause: rank 1 "), std::string::npos) << err;
  } else {
    EXPECT_NE(err.find("run stopped by the stall watchdog"), std::string::npos) << err;
    EXPECT_NE(err.find("rank 0 waited"), std::string::npos) << err;
    EXPECT_NE(err.find("rank 1 (pid"), std::string::npos) << err;  // named as stopped: it writes no record
  }
  // Every group of rank 0 left a record written on ddprun's request; rank 1 (killed or stopped) none.
  const bool off = c.setting.entries && std::string(c.setting.entries) == "0";
  std::vector<std::string> expected = {"flight.rank0.json"};
  if (c.setting.groups == 2) expected.insert(expected.begin(), "flight.rank0.gather.json");  // name order
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") found.push_back(e.path().filename().string());
  std::sort(found.begin(), found.end());
  if (off) {
    EXPECT_TRUE(found.empty()) << found.front();
    EXPECT_NE(err.find("no flight records: DDP_FLIGHT_RECORDER_ENTRIES=0 turned the recorder off"),
              std::string::npos)
        << err;
  } else {
    EXPECT_EQ(found, expected) << err;
    if (c.setting.groups == 2)
      EXPECT_NE(err.find("(2 files: one per group of each rank)"), std::string::npos) << err;
    for (const auto& name : found) {
      const auto rec = nlohmann::json::parse(file_text(dir / name), nullptr, false);
      ASSERT_TRUE(rec.is_object()) << name;
      // Written on ddprun's SIGUSR1. After a kill rank 0's shm collective may see its peer die first: then
      // that group's failure record, and the other group's written again as rank 0 exits (reason exit).
      if (std::string(c.fault.name) == "kill")
        EXPECT_TRUE(rec["reason"] == "signal" || rec["reason"] == "failure" || rec["reason"] == "exit")
            << name << " " << rec["reason"];
      else
        EXPECT_EQ(rec["reason"], "signal") << name;
      EXPECT_GE(rec["recorded"].get<int64_t>(), c.setting.fill) << name;
    }
    auto v = run_process({std::string(DDP_BIN_DIR) + "/ddp_flight", dir.string()});
    EXPECT_EQ(v.exit_code, 0) << v.err;
    EXPECT_NE(v.out.substr(0, v.out.find('\n')).find("rank 1 left no dump"), std::string::npos) << v.out;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Grid, RecorderSettings, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.setting.name) + "_" + i.param.fault.name;
                         });

}  // namespace
}  // namespace ddp::testing
