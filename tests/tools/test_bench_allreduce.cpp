// test_bench_allreduce.cpp - bench_allreduce's table at world 1: its rows run from --min-bytes to exactly
// --max-bytes (also where the size multiples step over it, as the defaults 4K * 4^k do at 32M), and its
// header says how time and busbw are computed (a median, where nccl-tests prints a mean).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_process.h"

namespace {

// The size column of the table's rows (lines that start with two spaces and a number).
std::vector<long long> row_sizes(const std::string& out) {
  std::vector<long long> sizes;
  std::istringstream in(out);
  std::string line;
  const std::regex row(R"(^  +(\d+) +\d+ )");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, row)) sizes.push_back(std::stoll(m[1]));
  }
  return sizes;
}

ddp::testing::ProcessResult bench(std::vector<std::string> args) {
  const std::string tool = std::string(DDP_BIN_DIR) + "/bench_allreduce";
  args.insert(args.begin(), tool);
  ddp::testing::ProcessOptions o;
  o.unset_env = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  o.set_env = {{"OPENBLAS_NUM_THREADS", "1"}};
  o.timeout_s = 60;
  return ddp::testing::run_process(args, o);
}

}  // namespace

TEST(BenchAllreduce, RowsEndAtMaxBytesAndTheHeaderSaysMedianAndBusbw) {
  if (!std::filesystem::exists(std::string(DDP_BIN_DIR) + "/bench_allreduce"))
    GTEST_SKIP() << "bin/bench_allreduce not built (DDP_BUILD_BENCH=OFF)";
  struct Case {
    std::vector<std::string> args;
    std::vector<long long> sizes;
  };
  const std::vector<Case> cases = {
      {{"--min-bytes", "4", "--max-bytes", "32", "--factor", "4"}, {4, 16, 32}},    // steps over 32
      {{"--min-bytes", "4", "--max-bytes", "64", "--factor", "4"}, {4, 16, 64}},    // lands on it
      {{"--min-bytes", "1K", "--max-bytes", "1K"}, {1024}},                         // one row
      {{"--min-bytes", "1K", "--max-bytes", "2K", "--factor", "3"}, {1024, 2048}},  // max below the next
      {{"--min-bytes", "16", "--max-bytes", "47", "--factor", "2"}, {16, 32, 47}},  // a prime max
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--iters", "1", "--warmup", "0", "--backend", "gloo"});
    auto r = bench(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    // A row's size is the bytes moved: count = max(1, bytes / 4) floats, so 47 bytes move 44.
    std::vector<long long> expected;
    for (long long b : c.sizes) expected.push_back(std::max(1LL, b / 4) * 4);
    EXPECT_EQ(row_sizes(r.out), expected) << r.out;
    EXPECT_NE(r.out.find("# time: the median of the 1 timed all-reduces"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(nccl-tests prints a mean)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("busbw = algbw * 2(n-1)/n with n = world 1"), std::string::npos) << r.out;
  }
  auto zero = bench({"--min-bytes", "0", "--max-bytes", "16"});
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_EQ(zero.err,
            "bench_allreduce: size '0' is not a positive number of bytes (examples: 4096, 64K, 32M)\n")
      << "one line, without a source location";
}

// --collective all: three tables (all-reduce, reduce-scatter, all-gather), each with its own busbw factor in
// the header and no wrong element; in place too; an unknown collective is refused by name.
TEST(BenchAllreduce, ReduceScatterAndAllgatherTablesBesideTheAllreduce) {
  if (!std::filesystem::exists(std::string(DDP_BIN_DIR) + "/bench_allreduce"))
    GTEST_SKIP() << "bin/bench_allreduce not built (DDP_BUILD_BENCH=OFF)";
  for (bool in_place : {false, true}) {
    std::vector<std::string> args = {"--collective", "all", "--min-bytes", "4K", "--max-bytes", "16K",
                                     "--iters",      "1",   "--warmup",    "0",  "--backend",   "gloo"};
    if (in_place) args.push_back("--in-place");
    auto r = bench(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(row_sizes(r.out), (std::vector<long long>{4096, 16384, 4096, 16384, 4096, 16384})) << r.out;
    EXPECT_NE(r.out.find("busbw = algbw * 2(n-1)/n with n = world 1 (nccl-tests' all-reduce"),
              std::string::npos);
    for (const char* c : {"reduce_scatter", "all_gather"}) {
      EXPECT_NE(r.out.find(std::string("# bench_allreduce ") + c + ": backend gloo, world 1"),
                std::string::npos)
          << r.out;
      EXPECT_NE(
          r.out.find(std::string("busbw = algbw * (n-1)/n with n = world 1 (nccl-tests' ") + c + " factor"),
          std::string::npos)
          << r.out;
    }
    EXPECT_NE(r.out.find(in_place ? ", in place," : ", out of place,"), std::string::npos) << r.out;
    // #wrong is the second-to-last column of every row.
    std::istringstream in(r.out);
    std::string line;
    const std::regex row(R"(^  +\d+ +\d+ +\S+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +(\d+) +[\d.]+$)");
    int rows = 0;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, row)) continue;
      ++rows;
      EXPECT_EQ(m[1], "0") << line;
    }
    EXPECT_EQ(rows, 6) << r.out;
  }
  auto bad = bench({"--collective", "broadcast", "--backend", "gloo"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown collective 'broadcast'"), std::string::npos) << bad.err;
}
