// test_train_unused_message.cpp - the unused-parameter error as a `train` user reads it (--model branchy
// without --find-unused-parameters): it names train's flag (not the C++ option) and the step of train's log
// ("step N", counted from the start of training, so after a resume too), says nothing of other ranks at world
// 1, and under ddprun each rank's message appears once in the whole output (not again in the failure
// summary). Also static_graph's error in train's words.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "models/train.h"
#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"
#include "tests/support/run_process.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

models::TrainOptions branchy(int64_t steps) {
  models::TrainOptions o;
  o.model = "branchy";
  o.data = "synthetic";
  o.quiet = true;
  o.steps = steps;
  o.warmup_steps = 1;
  o.batch_size = 8;
  o.eval_batches = 1;
  o.synthetic_samples = 256;
  return o;
}

std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("ddp_train_unused_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

// Runs train() on `world` threads; each rank's error ("" when it finished).
std::vector<std::string> errors_of(int world, const models::TrainOptions& o) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
    try {
      models::train(o, borrow(pg));
    } catch (const ddp::Error& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  return errors;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

void expect_train_words(const std::string& m, int world, int64_t step, const std::string& where) {
  EXPECT_TRUE(has(m, "received no gradient in step " + std::to_string(step) + " (")) << where << m;
  EXPECT_TRUE(has(m, "1. run train with --find-unused-parameters (")) << where << m;
  EXPECT_FALSE(has(m, "find_unused_parameters = true")) << where << m;
  EXPECT_FALSE(has(m, "construct DistributedDataParallel")) << where << m;
  EXPECT_TRUE(has(m, "cannot help a layer the forward did not run")) << where << m;
  EXPECT_EQ(has(m, "The other ranks were kept in step"), world > 1) << where << m;
  EXPECT_EQ(has(m, "other ranks"), world > 1) << where << m;
}

std::string train_path() { return std::string(DDP_BIN_DIR) + "/train"; }
std::vector<std::string> branchy_argv() {
  return {train_path(),          "--model", "branchy",        "--steps", "3", "--batch-size", "8",
          "--synthetic-samples", "64",      "--eval-batches", "1"};
}
ddp::testing::ProcessOptions clean_env() {
  ddp::testing::ProcessOptions po;
  po.unset_env = {"LOCAL_RANK",           "RANK",
                  "WORLD_SIZE",           "DDP_DEBUG",
                  "DDP_RUN_TOKEN",        "OMP_NUM_THREADS",
                  "OPENBLAS_NUM_THREADS", "TORCHELASTIC_ERROR_FILE"};
  po.timeout_s = 120;
  return po;
}
}  // namespace

// With --grad-accum 3 the first step's no_sync micro-steps are not iterations of their own: still step 1.
TEST(TrainUnusedMessage, NamesTrainsFlagAndTheStepAtWorlds1To3) {
  for (int world : {1, 2, 3}) {
    for (int64_t accum : {1, 3}) {
      models::TrainOptions o = branchy(3);
      o.grad_accum = accum;
      const auto errors = errors_of(world, o);
      for (int r = 0; r < world; ++r) {
        const std::string where = "world " + std::to_string(world) + " grad-accum " + std::to_string(accum) +
                                  " rank " + std::to_string(r) + ": ";
        ASSERT_FALSE(errors[r].empty()) << where << "branchy without --find-unused-parameters trained";
        expect_train_words(errors[r], world, 1, where);
      }
    }
  }
}

// Steps count from the start of training, as the log's "step N/M": a run resumed at step 2 fails in step 3.
TEST(TrainUnusedMessage, AfterAResumeTheStepIsTheLogsStep) {
  for (int world : {1, 2}) {
    const std::string dir = temp_dir("resume" + std::to_string(world));
    models::TrainOptions first = branchy(2);
    first.find_unused_parameters = true;
    first.checkpoint_dir = dir;
    ASSERT_EQ(errors_of(world, first), std::vector<std::string>(world)) << "world " << world;
    models::TrainOptions resumed = branchy(4);
    resumed.checkpoint_dir = dir;
    resumed.resume = "auto";
    const auto errors = errors_of(world, resumed);
    for (int r = 0; r < world; ++r)
      expect_train_words(errors[r], world, 3,
                         "world " + std::to_string(world) + " rank " + std::to_string(r) + ": ");
    std::filesystem::remove_all(dir);
  }
}

// --static-graph on branchy: the routing changes the graph at some step on some rank; its error says "since
// step 1" and how to turn the flag off, in train's words.
TEST(TrainUnusedMessage, StaticGraphsErrorIsInTrainsWordsToo) {
  models::TrainOptions o = branchy(40);
  o.static_graph = true;
  const auto errors = errors_of(2, o);
  bool any = false;
  for (int r = 0; r < 2; ++r) {
    const std::string& m = errors[r];
    if (!has(m, "Your training graph has changed"))
      continue;  // a rank that stayed on its graph: its peer left
    any = true;
    EXPECT_TRUE(has(m, "Your training graph has changed since step 1,")) << m;
    EXPECT_TRUE(has(m, "2. run train without --static-graph")) << m;
    EXPECT_FALSE(has(m, "DistributedDataParallel")) << m;
  }
  EXPECT_TRUE(any) << "branchy's routing never changed in 40 steps";
}

// The train program at world 1, no launcher: one message on stderr, exit 1.
TEST(TrainUnusedMessage, TheProgramAloneSaysItOnce) {
  auto r = ddp::testing::run_process(branchy_argv(), clean_env());
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count(r.out + r.err, "Fix one of"), 1u) << r.out << r.err;
  EXPECT_EQ(
      count(r.err,
            "train: error: rank 0: DDP finished this backward but 4 parameter(s) received no gradient in "
            "step 1 ("),
      1u)
      << r.err;
  expect_train_words(r.err, 1, 1, "alone: ");
}

// Under ddprun, worlds 1-3: every rank that printed the message printed it once, and ddprun's failure summary
// gives its first line and refers to the rest instead of repeating it (before: each rank's stderr plus the
// summary, twice per rank). A rank that ddprun stopped before it got to print may have printed nothing.
TEST(TrainUnusedMessage, UnderDdprunEachRanksMessageAppearsOnce) {
  for (int world : {1, 2, 3}) {
    std::vector<std::string> argv = {ddp::testing::ddprun_path(), "--nproc-per-node", std::to_string(world),
                                     "--master-port", "0"};
    for (auto& a : branchy_argv()) argv.push_back(a);
    auto r = ddp::testing::run_process(argv, clean_env());
    const std::string all = r.out + r.err, where = "world " + std::to_string(world) + ":\n";
    ASSERT_FALSE(r.timed_out) << where << all;
    EXPECT_EQ(r.exit_code, 1) << where << all;
    size_t printed = 0;
    for (int rank = 0; rank < world; ++rank) {
      const size_t n = count(all, "[rank " + std::to_string(rank) + "] train: error: rank " +
                                      std::to_string(rank) + ": DDP finished");
      EXPECT_LE(n, 1u) << where << all;
      printed += n;
    }
    EXPECT_GE(printed, 1u) << where << all;
    EXPECT_EQ(count(all, "Fix one of"), printed) << where << all;
    EXPECT_EQ(count(all, "] never_used.weight  shape"), printed) << where << all;
    EXPECT_EQ(count(all, "--find-unused-parameters ("), printed) << where << all;
    // The summary: each rank's first line at most, pointing at the rest.
    for (int rank = 0; rank < world; ++rank) {
      const std::string n = std::to_string(rank);
      EXPECT_LE(count(r.err,
                      " lines, printed above by rank " + n + "): train: error: rank " + n + ": DDP finished"),
                1u)
          << where << all;
      EXPECT_EQ(count(r.err, "ddprun: rank " + n + " error: "), 0u) << where << all;
    }
    EXPECT_TRUE(has(r.err, "ddprun: root cause: rank")) << where << all;
  }
}
