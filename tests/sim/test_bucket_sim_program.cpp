// test_bucket_sim_program.cpp - bin/bucket_sim's network and validation as a user meets them: without flags
// its default network is the cached bench_allreduce calibration of the backend in use on this host (named in
// the output, and its alpha/B are what the prediction uses), or, without one, a placeholder that the output
// calls a placeholder with how to calibrate; flags win over the cache. --validate keeps runs that differ only
// in the first-bucket cap apart, and --validate-world-1 predicts world-1 records.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/run_process.h"

namespace {
namespace fs = std::filesystem;
using ddp::testing::ProcessResult;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ddp_simprog_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

ProcessResult sim(const std::vector<std::string>& args, const fs::path& cache_dir) {
  std::vector<std::string> argv = {DDP_BIN_DIR "/bucket_sim"};
  argv.insert(argv.end(), args.begin(), args.end());
  ddp::testing::ProcessOptions o;
  o.set_env = {{"DDP_CALIBRATION_DIR", cache_dir.string()}, {"DDP_SHM", "1"}};
  return ddp::testing::run_process(argv, o);
}

// mlp's gradients: 784x1024 + 1024 + 1024x1024 + 1024 + 1024x10 + 10 float32 values, in 2 buckets at any cap.
constexpr double kMlpBytes = 4.0 * (784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);

TEST(BucketSimProgram, WithoutACalibrationTheDefaultNetworkIsSaidToBeAPlaceholder) {
  TempDir cache;
  auto r = sim({"--model", "mlp", "--backward-ms", "5", "--backend", "shm"}, cache.path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string expected_file = (cache.path / "allreduce-shm-").string();
  EXPECT_NE(r.out.find("alpha 1.531 ms, B 0.847 GB/s (a PLACEHOLDER"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not backend shm on this host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no " + expected_file), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning: the network above is a placeholder"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tools/ddp bench --sweep"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bench_allreduce --backend shm --registered --json " + expected_file), std::string::npos)
      << r.out;
}

TEST(BucketSimProgram, TheCachedCalibrationOfTheBackendIsTheDefaultAndItsFitIsUsed) {
  TempDir cache;
  for (const char* backend : {"shm", "gloo"}) {
    auto where = sim({"--print-calibration-path", "--backend", backend, "--world", "2"}, cache.path);
    ASSERT_EQ(where.exit_code, 0) << where.err;
    std::string path = where.out.substr(0, where.out.find('\n'));
    EXPECT_EQ(fs::path(path).parent_path(), cache.path) << path;
    EXPECT_EQ(fs::path(path).filename().string().rfind(std::string("allreduce-") + backend + "-", 0), 0u) << path;
    // shm: alpha 20 us, B 3 GB/s; gloo: alpha 500 us, B 1 GB/s.
    const bool shm = std::string(backend) == "shm";
    std::ofstream(path) << "{\"kind\":\"allreduce\",\"backend\":\"" << backend
                        << "\",\"world\":2,\"points\":[],\"fit\":{\"algorithm\":\"ring\",\"alpha_s\":"
                        << (shm ? "2e-05" : "5e-04") << ",\"bandwidth_bytes_per_s\":" << (shm ? "3e9" : "1e9")
                        << "}}\n";
  }
  for (const char* backend : {"shm", "gloo"}) {
    const bool shm = std::string(backend) == "shm";
    auto r = sim({"--model", "mlp", "--backward-ms", "5", "--backend", backend, "--caps", "25"}, cache.path);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(shm ? "alpha 0.02 ms, B 3 GB/s (cached calibration " : "alpha 0.5 ms, B 1 GB/s (cached calibration "),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find(std::string("allreduce-") + backend + "-"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(std::string("backend ") + backend + ", host "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("PLACEHOLDER"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;
    // comm_ms of the 25 MiB row: 2 buckets x 2 alpha + all bytes / B (ring over 2 ranks).
    const double comm_ms = (shm ? 2 * 2 * 2e-5 + kMlpBytes / 3e9 : 2 * 2 * 5e-4 + kMlpBytes / 1e9) * 1e3;
    char want[32];
    std::snprintf(want, sizeof want, "%.3f", comm_ms);
    EXPECT_NE(r.out.find(std::string("        2 ") + std::string(12 - std::string(want).size(), ' ') + want),
              std::string::npos)
        << "comm " << want << " ms expected:\n" << r.out;
  }
  // World 8 has no file: the world-2 fit, said so.
  auto other_world = sim({"--model", "mlp", "--backward-ms", "5", "--backend", "shm", "--world", "8"}, cache.path);
  ASSERT_EQ(other_world.exit_code, 0) << other_world.err;
  EXPECT_NE(other_world.out.find("world 2; per-link alpha and B used for world 8"), std::string::npos)
      << other_world.out;
  // Flags win over the cache, and say so.
  auto given = sim({"--model", "mlp", "--backward-ms", "5", "--backend", "shm", "--alpha-us", "7"}, cache.path);
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_NE(given.out.find("alpha 0.007 ms, B 0.847 GB/s (given by --alpha-us/--bandwidth-gbps)"), std::string::npos)
      << given.out;
}

nlohmann::json e2e_record(const std::string& mode, int world, double first_mb, double step_s) {
  auto stat = [](double v) { return nlohmann::json{{"median", v}, {"p10", v}, {"p90", v}}; };
  return {{"kind", "e2e"},
          {"config", "mlp"},
          {"mode", mode},
          {"world", world},
          {"bucket_cap_mb", 25.0},
          {"first_bucket_mb", first_mb},
          {"buckets", 2},
          {"device", "cpu"},
          {"step_s", stat(step_s)},
          {"forward_s", stat(0.002)},
          {"backward_s", stat(0.004)},
          {"backward_compute_s", stat(0.004)},
          {"communication_s", stat(mode == "nosync" ? 0.0 : 0.001)},
          {"exposed_communication_s", stat(mode == "nosync" ? 0.0 : 0.0005)},
          {"optimizer_s", stat(0.0005)}};
}

TEST(BucketSimProgram, ValidationKeepsFirstBucketCapsApartAndPredictsWorldOneOnRequest) {
  TempDir dir;
  const fs::path bench = dir.path / "bench.json", rows = dir.path / "rows.json";
  {
    std::ofstream out(bench);
    for (int pass = 0; pass < 2; ++pass) {  // repeated passes merge into one row per point
      out << e2e_record("nosync", 2, 1.0, 0.007).dump() << "\n";
      out << e2e_record("ddp", 2, 1.0, 0.008).dump() << "\n";
      out << e2e_record("ddp", 2, 4.0, 0.009).dump() << "\n";
      out << e2e_record("nosync", 1, 1.0, 0.006).dump() << "\n";
      out << e2e_record("ddp", 1, 1.0, 0.0065).dump() << "\n";
    }
  }
  auto r = sim({"--validate", bench.string(), "--alpha-us", "20", "--bandwidth-gbps", "3", "--validate-json",
                rows.string(), "--validate-world-1", "--max-error-pct", "1000"},
               dir.path);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("isolated network (given by --alpha-us/--bandwidth-gbps)"), std::string::npos) << r.out;
  std::ifstream in(rows);
  std::string line;
  std::vector<nlohmann::json> got;
  while (std::getline(in, line)) got.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(got.size(), 3u) << r.out;
  std::vector<std::tuple<int, double, double>> seen;  // world, first bucket, measured
  for (auto& j : got) seen.emplace_back(j["world"].get<int>(), j["first_bucket_mb"].get<double>(), j["measured_s"].get<double>());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen[0], std::make_tuple(1, 1.0, 0.0065));
  EXPECT_EQ(seen[1], std::make_tuple(2, 1.0, 0.008));
  EXPECT_EQ(seen[2], std::make_tuple(2, 4.0, 0.009));
  // World 1 has no collectives: the prediction is the world-1 nosync run's forward + backward + optimizer
  // (its step, 6 ms, is below their sum: no rest) plus the reducer's copies in and back (17 GB/s each).
  for (auto& j : got)
    if (j["world"] == 1) EXPECT_NEAR(j["predicted_s"].get<double>(), 0.0065 + 2 * kMlpBytes / 17e9, 1e-9);
  // Without --validate-world-1 the world-1 record is left out, as before.
  auto two = sim({"--validate", bench.string(), "--alpha-us", "20", "--bandwidth-gbps", "3", "--max-error-pct", "1000"},
                 dir.path);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(two.out.find("\nmlp        1 ddp"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("\nmlp        2 ddp"), std::string::npos) << two.out;
}

TEST(BucketSimProgram, ValidationWithoutAnyNetworkSaysHowToGetOne) {
  TempDir dir;
  const fs::path bench = dir.path / "bench.json";
  std::ofstream(bench) << e2e_record("nosync", 2, 1.0, 0.007).dump() << "\n"
                       << e2e_record("ddp", 2, 1.0, 0.008).dump() << "\n";
  auto r = sim({"--validate", bench.string(), "--backend", "shm"}, dir.path / "no_cache");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("--validate needs the network model"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cached calibration"), std::string::npos) << r.err;
}

}  // namespace
