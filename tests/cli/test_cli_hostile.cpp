// test_cli_hostile.cpp - careless and hostile command lines: one option given twice with different spellings,
// numbers out of range (nan, inf, negative counts) named by their flag where they are parsed, and the same
// through the `train` program (exit 2, nothing trained).
#include <gtest/gtest.h>
#include <stdlib.h>

#include "runtime/core/cli.h"
#include "tests/support/run_process.h"

namespace ddp::cli {
namespace {

std::string error_of(Parser& p, const std::vector<std::string>& args) {
  try {
    p.parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

struct Flags {
  double lr = 0.1, ratio = 0.5;
  int64_t depth = 2;
  int threads = 0;
  Parser p{"train", ""};
  Flags() {
    p.add("lr", &lr, "learning rate");
    p.add("ratio", &ratio, "a ratio", Bounds::between(0, 1, /*hi_open=*/true));
    p.add("depth", &depth, "layers", Bounds::at_least(0));
    p.add("threads", &threads, "threads", Bounds::at_least(0));
  }
};

}  // namespace

TEST(CliHostile, ConflictingSpellingsOfOneOptionAreAnError) {
  ::unsetenv("LOCAL_RANK");
  {
    Flags f;
    std::string m = error_of(f.p, {"--local_rank=1", "--local-rank", "0"});
    EXPECT_NE(m.find("--local_rank=1 and --local-rank=0"), std::string::npos) << m;
    EXPECT_NE(m.find("pass it once"), std::string::npos) << m;
  }
  {
    Flags f;  // --local-rank twice in one spelling still disagrees (a launcher and the user both set it)
    EXPECT_NE(error_of(f.p, {"--local-rank=1", "--local-rank=0"}).find("two different values"), std::string::npos);
  }
  {
    Flags g;  // another option in two spellings
    g.p.add("batch-size", &g.depth, "b");
    EXPECT_NE(error_of(g.p, {"--batch_size", "1", "--batch-size", "2"}).find("--batch_size=1 and --batch-size=2"),
              std::string::npos);
  }
  {
    Flags f;  // the same value twice, or the same spelling twice (an override), is fine
    EXPECT_TRUE(f.p.parse({"--local_rank=1", "--local-rank", "1", "--lr", "0.1", "--lr", "0.3"}));
    EXPECT_EQ(f.p.local_rank(), 1);
    EXPECT_DOUBLE_EQ(f.lr, 0.3);
  }
}

TEST(CliHostile, NonFiniteNumbersAreRejectedWithTheFlagNamed) {
  for (const char* v : {"inf", "-inf", "nan", "NaN"}) {
    Flags f;
    std::string m = error_of(f.p, {"--lr", v});
    EXPECT_NE(m.find("train: --lr expects a finite number"), std::string::npos) << v << ": " << m;
    EXPECT_DOUBLE_EQ(f.lr, 0.1) << "the value must not be stored";
  }
  for (const char* v : {"1e999", "-1e999", "1e-999"}) {  // a number, but not one a double can hold
    Flags f;
    std::string m = error_of(f.p, {"--lr", v});
    EXPECT_NE(m.find("train: --lr got '" + std::string(v) + "', which is out of range"), std::string::npos)
        << v << ": " << m;
    EXPECT_DOUBLE_EQ(f.lr, 0.1) << "the value must not be stored";
  }
}

TEST(CliHostile, BoundsAreCheckedWhereTheFlagIsParsed) {
  Flags f;
  EXPECT_EQ(error_of(f.p, {"--depth", "-1"}), "train: --depth must be >= 0, got -1");
  Flags g;
  EXPECT_EQ(error_of(g.p, {"--threads=-1"}), "train: --threads must be >= 0, got -1");
  Flags h;
  EXPECT_EQ(error_of(h.p, {"--ratio", "1"}), "train: --ratio must be in [0, 1), got 1");
  Flags k;
  EXPECT_TRUE(k.p.parse({"--ratio", "0", "--depth", "0", "--threads", "3"}));
  EXPECT_EQ(k.threads, 3);
  EXPECT_EQ(Bounds::above(0).text(), "> 0");
  EXPECT_FALSE(Bounds::above(0).contains(0));
}

// The train program: the cases of the issue report are usage errors (exit 2) naming the flag, before anything
// starts.
TEST(CliHostile, TrainRejectsBadNumbersNamingTheFlag) {
  const std::string train = std::string(DDP_BIN_DIR) + "/train";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--lr", "inf"}, "--lr expects a finite number"},
      {{"--lr", "nan"}, "--lr expects a finite number"},
      {{"--depth", "-1"}, "--depth must be >= 0, got -1"},
      {{"--steps", "-1"}, "--steps must be >= 0, got -1"},
      {{"--threads", "-1"}, "--threads must be >= 0, got -1"},
      {{"--clip-grad", "nan"}, "--clip-grad expects a finite number"},
      {{"--lr", "1e400"}, "--lr got '1e400', which is out of range"},
      {{"--powersgd-rank", "0"}, "--powersgd-rank must be >= 1, got 0"},
      {{"--comm-hook", "powersgd", "--powersgd-rank", "-3"}, "--powersgd-rank must be >= 1, got -3"},
      {{"--powersgd-start-iter", "1"}, "--powersgd-start-iter must be >= 2, got 1"},
      {{"--local_rank=1", "--local-rank", "0"}, "two different values"},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> argv = {train};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::ProcessOptions po;
    po.unset_env = {"LOCAL_RANK", "RANK", "WORLD_SIZE"};
    po.timeout_s = 30;
    auto r = testing::run_process(argv, po);
    EXPECT_EQ(r.exit_code, 2) << args[0] << "\n" << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args[0] << ": " << r.err;
    EXPECT_EQ(r.out.find("train: model"), std::string::npos) << "training started: " << r.out;
  }
}

}  // namespace ddp::cli
