// test_calibration_cache.cpp - the cached bench_allreduce calibrations of the bucket simulator: the file name
// keyed by backend, host and world (characters a host may hold cannot make two keys collide), the look-up
// (exact world first, else the nearest, the smaller on a tie; other backends and hosts ignored; nothing when
// the folder is absent or holds none) and clear errors for a file that exists but is not a calibration.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "runtime/core/error.h"
#include "runtime/sim/calibration_cache.h"

namespace {
namespace fs = std::filesystem;
using namespace ddp::sim;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ddp_calcache_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string record(int world, double alpha_s, double bandwidth, const std::string& backend = "shm") {
  return "{\"kind\":\"allreduce\",\"backend\":\"" + backend + "\",\"world\":" + std::to_string(world) +
         ",\"points\":[],\"fit\":{\"algorithm\":\"ring\",\"alpha_s\":" + std::to_string(alpha_s) +
         ",\"bandwidth_bytes_per_s\":" + std::to_string(bandwidth) + "}}\n";
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

TEST(CalibrationCache, FileNameIsKeyedByBackendHostAndWorld) {
  EXPECT_EQ(calibration_file_name("shm", "vm", 2), "allreduce-shm-vm-w2.json");
  EXPECT_EQ(calibration_file_name("nccl", "gpu-node.example", 8), "allreduce-nccl-gpu_node.example-w8.json");
  EXPECT_EQ(calibration_file_name("gloo", "a/b c\n", 1), "allreduce-gloo-a_b_c_-w1.json");
  EXPECT_THROW(calibration_file_name("", "vm", 2), ddp::Error);
  EXPECT_THROW(calibration_file_name("shm", "", 2), ddp::Error);
  EXPECT_THROW(calibration_file_name("shm", "vm", 0), ddp::Error);
  try {
    calibration_file_name("shm", "vm", 0);
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("world size 0"), std::string::npos) << e.what();
  }
}

// Random host names of the characters a separator could be confused with ('-', 'w', digits, '_', '.'): the
// look-up for one host never returns another host's file, whatever the worlds (hosts that differ only in '-'
// against '_' share a name; one of each is kept).
TEST(CalibrationCache, RandomHostNamesNeverFindAnotherHostsFile) {
  std::mt19937 rng(26);
  const std::string alphabet = "ab-w2_.";
  TempDir dir;
  std::map<std::string, std::pair<std::string, double>> by_name;  // file-name part -> (host, its alpha)
  for (int i = 0; i < 60; ++i) {
    std::string host;
    const int len = 1 + static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) host += alphabet[rng() % alphabet.size()];
    const int world = 1 + static_cast<int>(rng() % 4);
    const std::string name = calibration_file_name("shm", host, world);
    const std::string part = name.substr(0, name.rfind("-w"));
    if (by_name.count(part)) continue;
    const double alpha = 1e-6 * (i + 1);
    by_name[part] = {host, alpha};
    write(dir.path / name, record(world, alpha, 1e9));
  }
  ASSERT_GT(by_name.size(), 20u);
  for (auto& [part, host_alpha] : by_name)
    for (int world : {1, 2, 3, 5}) {
      auto c = find_calibration(dir.path.string(), "shm", host_alpha.first, world);
      ASSERT_TRUE(c) << host_alpha.first;
      EXPECT_DOUBLE_EQ(c->network.alpha_s, host_alpha.second) << "host '" << host_alpha.first << "' found " << c->path;
    }
}

TEST(CalibrationCache, ExactWorldFirstThenTheNearestTheSmallerOnATie) {
  TempDir dir;
  write(dir.path / calibration_file_name("shm", "vm", 2), record(2, 2e-5, 3e9));
  write(dir.path / calibration_file_name("shm", "vm", 4), record(4, 4e-5, 5e9));
  write(dir.path / calibration_file_name("gloo", "vm", 3), record(3, 1e-3, 1e9, "gloo"));
  write(dir.path / calibration_file_name("shm", "other", 3), record(3, 9e-3, 1e8));
  write(dir.path / "allreduce-shm-vm-wx.json", "not a calibration\n");  // no world number: not a candidate
  const std::string d = dir.path.string();
  struct Case {
    int world, expect_world;
    double alpha;
  };
  for (const Case& c : {Case{2, 2, 2e-5}, Case{4, 4, 4e-5}, Case{3, 2, 2e-5}, Case{1, 2, 2e-5}, Case{64, 4, 4e-5}}) {
    auto got = find_calibration(d, "shm", "vm", c.world);
    ASSERT_TRUE(got) << "world " << c.world;
    EXPECT_EQ(got->world, c.expect_world) << "world " << c.world;
    EXPECT_EQ(fs::path(got->path).filename().string(), calibration_file_name("shm", "vm", c.expect_world));
    EXPECT_DOUBLE_EQ(got->network.alpha_s, c.alpha);
  }
  auto gloo = find_calibration(d, "gloo", "vm", 2);
  ASSERT_TRUE(gloo);
  EXPECT_EQ(gloo->world, 3);
  EXPECT_DOUBLE_EQ(gloo->network.alpha_s, 1e-3);
  EXPECT_FALSE(find_calibration(d, "nccl", "vm", 2));
  EXPECT_FALSE(find_calibration(d, "shm", "nohost", 2));
  EXPECT_FALSE(find_calibration((dir.path / "absent").string(), "shm", "vm", 2));
}

TEST(CalibrationCache, TheRecordOfTheWorldElseTheLastWithAFit) {
  TempDir dir;
  const fs::path f = dir.path / "mixed.json";
  write(f, record(2, 1e-5, 2e9) + "{\"kind\":\"e2e\"}\n\n" + record(4, 3e-5, 4e9) +
               "{\"kind\":\"allreduce\",\"world\":8,\"points\":[]}\n");
  int w = 0;
  EXPECT_DOUBLE_EQ(network_from_allreduce_json(f.string(), 2, &w).alpha_s, 1e-5);
  EXPECT_EQ(w, 2);
  EXPECT_DOUBLE_EQ(network_from_allreduce_json(f.string(), 4, &w).bandwidth_bytes_per_s, 4e9);
  EXPECT_EQ(w, 4);
  EXPECT_DOUBLE_EQ(network_from_allreduce_json(f.string(), 8, &w).alpha_s, 3e-5);  // no fit at 8: the last
  EXPECT_EQ(w, 4);
}

TEST(CalibrationCache, AFileThatIsNoCalibrationIsAnErrorNamingIt) {
  TempDir dir;
  const fs::path bad = dir.path / calibration_file_name("shm", "vm", 2);
  auto expect_error = [&](const std::string& text, const std::string& phrase) {
    write(bad, text);
    try {
      find_calibration(dir.path.string(), "shm", "vm", 2);
      ADD_FAILURE() << "no error for: " << text;
    } catch (const ddp::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(bad.string()), std::string::npos) << m;
      EXPECT_NE(m.find(phrase), std::string::npos) << m;
    }
  };
  expect_error("{\"kind\":\"allreduce\"\n", "line 1 is not JSON");
  expect_error("{\"kind\":\"allreduce\",\"world\":2,\"points\":[]}\n", "no all-reduce record with a fit");
  expect_error("", "no all-reduce record with a fit");
  expect_error(record(2, 1e-5, -1), "B > 0");
  EXPECT_THROW(network_from_allreduce_json((dir.path / "absent.json").string(), 2), ddp::Error);
}

}  // namespace
