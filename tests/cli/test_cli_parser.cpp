// test_cli_parser.cpp - the project's command-line parser: spellings, typed values, errors with
// suggestions, --help, and the --local-rank / LOCAL_RANK rules.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <limits>

#include "runtime/core/cli.h"

namespace ddp::cli {
namespace {

enum class Mode { Fast, Safe };

struct Program {
  int batch = 32;
  int64_t steps = 100;
  double lr = 0.001;
  std::string name = "mlp";
  bool verbose = false;
  std::string backend = "gloo";
  Mode mode = Mode::Safe;
  Parser p{"train", "Trains a model."};
  Program() {
    p.add("batch-size", &batch, "per-rank batch");
    p.add("steps", &steps, "optimizer steps");
    p.add("lr", &lr, "learning rate");
    p.add("model_name", &name, "model to train");  // declared with an underscore: stored as model-name
    p.add("verbose", &verbose, "log every step");
    p.add_choice("backend", &backend, {"gloo", "nccl"}, "communication backend");
    p.add_enum("mode", &mode, {{"fast", Mode::Fast}, {"safe", Mode::Safe}}, "speed or safety");
  }
};

// Runs a parser with LOCAL_RANK set (or unset with nullptr) and restores the environment.
struct LocalRankEnv {
  explicit LocalRankEnv(const char* v) {
    if (v)
      ::setenv("LOCAL_RANK", v, 1);
    else
      ::unsetenv("LOCAL_RANK");
  }
  ~LocalRankEnv() { ::unsetenv("LOCAL_RANK"); }
};

std::string error_of(Program& prog, const std::vector<std::string>& args) {
  try {
    prog.p.parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(CliParser, DashUnderscoreSpaceAndEquals) {
  LocalRankEnv env(nullptr);
  Program a;
  ASSERT_TRUE(a.p.parse({"--batch-size", "64", "--steps=7", "--lr", "-0.5", "--model-name=gpt", "--verbose",
                         "--backend", "nccl", "--mode=fast"}));
  EXPECT_EQ(a.batch, 64);
  EXPECT_EQ(a.steps, 7);
  EXPECT_DOUBLE_EQ(a.lr, -0.5);
  EXPECT_EQ(a.name, "gpt");
  EXPECT_TRUE(a.verbose);
  EXPECT_EQ(a.backend, "nccl");
  EXPECT_EQ(a.mode, Mode::Fast);
  EXPECT_TRUE(a.p.given("batch_size"));
  EXPECT_FALSE(a.p.given("local-rank"));

  Program b;
  ASSERT_TRUE(
      b.p.parse({"--batch_size=16", "--model_name", "cnn", "--verbose=false", "--steps", "9000000000"}));
  EXPECT_EQ(b.batch, 16);
  EXPECT_EQ(b.name, "cnn");
  EXPECT_FALSE(b.verbose);
  EXPECT_EQ(b.steps, 9000000000LL);
  EXPECT_FALSE(b.p.given("lr"));
  EXPECT_DOUBLE_EQ(b.lr, 0.001) << "untouched options keep their default";

  Program c;
  c.verbose = true;
  ASSERT_TRUE(c.p.parse({"--no-verbose"}));
  EXPECT_FALSE(c.verbose);
}

TEST(CliParser, UnknownFlagNamesTheClosest) {
  LocalRankEnv env(nullptr);
  Program a;
  EXPECT_EQ(error_of(a, {"--bach-size", "3"}), "train: unknown flag --bach-size; did you mean --batch-size?");
  Program b;
  EXPECT_EQ(error_of(b, {"--bach_size=3"}), "train: unknown flag --bach_size; did you mean --batch-size?");
  Program c;
  EXPECT_EQ(error_of(c, {"--stpes", "3"}), "train: unknown flag --stpes; did you mean --steps?");
  Program d;
  EXPECT_EQ(error_of(d, {"--completely-different"}),
            "train: unknown flag --completely-different; run 'train --help' to list the flags");
  Program e;
  EXPECT_EQ(error_of(e, {"-batch-size"}), "train: unknown flag -batch-size; did you mean --batch-size?");
  Program f;
  EXPECT_EQ(error_of(f, {"---"}), "train: unknown flag ---; run 'train --help' to list the flags");
  Program g;
  EXPECT_EQ(error_of(g, {"--=3"}), "train: unknown flag --; run 'train --help' to list the flags");
}

TEST(CliParser, BadValuesNameTheFlag) {
  LocalRankEnv env(nullptr);
  Program a;
  EXPECT_EQ(error_of(a, {"--batch-size", "abc"}), "train: --batch-size expects an integer, got 'abc'");
  Program b;
  EXPECT_EQ(error_of(b, {"--batch_size=99999999999"}),
            "train: --batch_size got '99999999999', which is out of range: an integer from -2147483648 to "
            "2147483647");
  Program c;
  EXPECT_EQ(error_of(c, {"--lr", "1e-3x"}), "train: --lr expects a number, got '1e-3x'");
  Program d;
  EXPECT_EQ(error_of(d, {"--backend", "mpi"}), "train: --backend got 'mpi'; allowed values: gloo, nccl");
  Program e;
  EXPECT_EQ(error_of(e, {"--mode=turbo"}), "train: --mode got 'turbo'; allowed values: fast, safe");
  Program f;
  EXPECT_EQ(error_of(f, {"--steps"}), "train: --steps needs a value (INT)");
  Program g;
  EXPECT_EQ(error_of(g, {"--verbose=maybe"}), "train: --verbose expects true or false, got 'maybe'");
  Program h;
  EXPECT_EQ(error_of(h, {"stray"}),
            "train: unexpected argument 'stray' (this program takes no positional arguments)");
}

// A number too large (or too small) for its type is named as out of range, not as "not a number": at each
// edge of each type, the last value that fits is taken and the next one is refused.
TEST(CliParser, NumbersOutsideTheirTypeAreOutOfRangeNotMalformed) {
  LocalRankEnv env(nullptr);
  const std::string int_range = "which is out of range: an integer from -2147483648 to 2147483647";
  const std::string int64_range =
      "which is out of range: an integer from -9223372036854775808 to 9223372036854775807";
  const std::string double_range = "which is out of range: a number's magnitude must lie between";
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--batch-size", "2147483648"}, int_range},
      {{"--batch-size", "-2147483649"}, int_range},
      {{"--batch-size", "+99999999999999999999999"}, int_range},
      {{"--steps", "9223372036854775808"}, int64_range},
      {{"--steps", "-9223372036854775809"}, int64_range},
      {{"--lr", "1e400"}, double_range},
      {{"--lr", "-1e400"}, double_range},
      {{"--lr", "1e-400"}, double_range},
      {{"--lr=1.8e308"}, double_range},
  };
  for (const auto& [args, expected] : refused) {
    Program p;
    const std::string m = error_of(p, args);
    EXPECT_NE(m.find(expected), std::string::npos) << args[0] << " " << args.back() << ": " << m;
    EXPECT_NE(m.find("got '"), std::string::npos) << "the value is quoted: " << m;
    EXPECT_EQ(p.batch, 32);
    EXPECT_EQ(p.steps, 100);
    EXPECT_DOUBLE_EQ(p.lr, 0.001);
  }
  Program a;
  ASSERT_TRUE(
      a.p.parse({"--batch-size", "2147483647", "--steps", "-9223372036854775808", "--lr", "1.7e308"}));
  EXPECT_EQ(a.batch, 2147483647);
  EXPECT_EQ(a.steps, std::numeric_limits<int64_t>::min());
  EXPECT_DOUBLE_EQ(a.lr, 1.7e308);
  Program b;
  ASSERT_TRUE(
      b.p.parse({"--batch-size", "-2147483648", "--steps", "9223372036854775807", "--lr", "4.9e-324"}));
  EXPECT_EQ(b.batch, std::numeric_limits<int>::min());
  EXPECT_EQ(b.steps, std::numeric_limits<int64_t>::max());
  EXPECT_GT(b.lr, 0.0);  // the smallest subnormal is a number, not out of range
  Program c;             // malformed stays malformed, whatever its length
  EXPECT_EQ(error_of(c, {"--lr", "1e400x"}), "train: --lr expects a number, got '1e400x'");
  Program d;
  EXPECT_EQ(error_of(d, {"--steps", "99999999999999999999x"}),
            "train: --steps expects an integer, got '99999999999999999999x'");
}

TEST(CliParser, HelpListsFlagsWithDefaults) {
  LocalRankEnv env(nullptr);
  Program a;
  EXPECT_FALSE(a.p.parse({"--batch-size", "3", "--help"}));
  Program b;
  EXPECT_FALSE(b.p.parse({"-h"}));
  std::string h = b.p.help();
  EXPECT_NE(h.find("usage: train [options]"), std::string::npos) << h;
  EXPECT_NE(h.find("Trains a model."), std::string::npos);
  EXPECT_NE(h.find("--batch-size INT"), std::string::npos) << h;
  EXPECT_NE(h.find("per-rank batch (default: 32)"), std::string::npos) << h;
  EXPECT_NE(h.find("--backend {gloo,nccl}"), std::string::npos) << h;
  EXPECT_NE(h.find("(default: gloo)"), std::string::npos) << h;
  EXPECT_NE(h.find("--mode {fast,safe}"), std::string::npos) << h;
  EXPECT_NE(h.find("(default: safe)"), std::string::npos) << h;
  EXPECT_NE(h.find("--model-name STR"), std::string::npos) << h;
  EXPECT_NE(h.find("--local-rank INT"), std::string::npos) << h;
  EXPECT_NE(h.find("--help"), std::string::npos);
}

TEST(CliParser, LocalRankFromEverySpellingAndTheEnvironment) {
  {
    LocalRankEnv env(nullptr);
    Program a;
    a.p.parse(std::vector<std::string>{});
    EXPECT_EQ(a.p.local_rank(), -1);
  }
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--local-rank", "3"}, std::vector<std::string>{"--local-rank=3"},
        std::vector<std::string>{"--local_rank=3"}, std::vector<std::string>{"--local_rank", "3"}}) {
    LocalRankEnv env(nullptr);
    Program a;
    a.p.parse(args);
    EXPECT_EQ(a.p.local_rank(), 3) << args[0];
  }
  {
    LocalRankEnv env("2");
    Program a;
    a.p.parse(std::vector<std::string>{});
    EXPECT_EQ(a.p.local_rank(), 2);
    Program same;
    same.p.parse({"--local_rank=2"});
    EXPECT_EQ(same.p.local_rank(), 2);
    Program differ;
    EXPECT_EQ(
        error_of(differ, {"--local-rank=1"}),
        "train: --local-rank=1 disagrees with LOCAL_RANK=2 in the environment; pass one of them, or the "
        "same value");
  }
  {
    LocalRankEnv env("two");
    Program a;
    EXPECT_NE(error_of(a, {}).find("LOCAL_RANK='two'"), std::string::npos);
  }
}

TEST(CliParser, LauncherModeStopsAtTheProgram) {
  LocalRankEnv env(nullptr);
  int n = 1;
  Parser p("ddprun", "");
  p.disable_local_rank();
  p.stop_at_first_positional();
  p.add("nproc-per-node", &n, "workers");
  ASSERT_TRUE(p.parse({"--nproc_per_node", "2", "prog", "--nproc-per-node", "5", "--local-rank=1"}));
  EXPECT_EQ(n, 2);
  EXPECT_EQ(p.rest(), (std::vector<std::string>{"prog", "--nproc-per-node", "5", "--local-rank=1"}));
  Parser q("ddprun", "");
  q.disable_local_rank();
  q.stop_at_first_positional();
  EXPECT_THROW(q.parse({"--local-rank", "0", "prog"}), UsageError);
  EXPECT_EQ(q.help().find("local-rank"), std::string::npos);
}

TEST(CliParser, OptionalValueChoicesAndPositionals) {
  LocalRankEnv env(nullptr);
  std::string style = "none";
  std::vector<std::string> files;
  Parser p("tool", "");
  p.add_choice_optional_value("style", &style, {"none", "dash", "underscore"}, "dash", "style");
  p.add_positionals("FILE", &files, "inputs");
  ASSERT_TRUE(p.parse({"a", "--style", "b", "--", "--not-a-flag"}));
  EXPECT_EQ(style, "dash");
  EXPECT_EQ(files, (std::vector<std::string>{"a", "b", "--not-a-flag"}));
  ASSERT_TRUE(p.parse({"--style=underscore"}));
  EXPECT_EQ(style, "underscore");
}

TEST(CliParser, DeclarationMistakesAreCaught) {
  int x = 0;
  Parser p("tool", "");
  p.add("x", &x, "x");
  EXPECT_THROW(p.add("x", &x, "again"), Error);
  EXPECT_THROW(p.add("--y", &x, "dashes"), Error);
  EXPECT_THROW(p.add("local_rank", &x, "built in"), Error);
  EXPECT_THROW(p.given("never-declared"), Error);
}

TEST(CliParser, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("abc", ""), 3);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("bach-size", "batch-size"), 1);
}

}  // namespace
}  // namespace ddp::cli
