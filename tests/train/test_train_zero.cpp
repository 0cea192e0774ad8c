// test_train_zero.cpp - `train --zero {0,1,2,3}` (issue 23): stages 2 and 3 (ShardedDataParallel +
// ShardedOptimizer) train the mlp and the gpt at world 2 to the same loss and parameters as plain DDP (float64,
// 1e-12), with clipping, gradient accumulation and Join (ZeRO-3 gathers on a second group); what they do not
// support is refused on every rank with the flag and the way out; the program takes "--zero N", "--zero=N" and
// a bare "--zero" (stage 1) and prints the memory account.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "models/train.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "tests/support/ddp_test_util.h"
#include "tests/support/run_process.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

models::TrainOptions tiny(const std::string& model) {
  models::TrainOptions o;
  o.model = model;
  o.data = "synthetic";
  o.quiet = true;
  o.steps = 5;
  o.warmup_steps = 1;
  o.batch_size = 8;
  o.eval_batches = 2;
  o.eval_interval = 3;  // an evaluation inside the run too (ZeRO-3: a gathered scope between steps)
  o.synthetic_samples = 256;
  o.hidden = 16;
  o.lr = 1e-2;
  o.dtype = "float64";
  o.optimizer = "adamw";
  o.clip_grad = 0.05;  // clips: the global norm across the shards
  o.bucket_cap_mb = 0.002;  // several buckets (ZeRO-3: several units anyway)
  o.first_bucket_mb = 0.002;
  if (model == "gpt") {
    o.context = 8;
    o.d_model = 16;
    o.n_head = 2;
    o.n_layer = 2;
    o.synthetic_samples = 64;
    o.batch_size = 4;
    o.sample_tokens = 4;
  }
  return o;
}

// `world` ranks on `backend`; with --zero 3 each rank also gets a gather group, as the train program makes it.
std::vector<models::TrainResult> run_world(int world, const std::function<models::TrainOptions(int)>& per_rank,
                                           const std::string& backend = "shm") {
  std::vector<models::TrainResult> r(static_cast<size_t>(world));
  dist::run_threads(
      world,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        const models::TrainOptions o = per_rank(rank);
        std::shared_ptr<dist::ProcessGroup> gather;
        if (o.zero == 3) {
          dist::DistEnv env;
          env.rank = rank;
          env.world_size = world;
          dist::ProcessGroupOptions go;
          go.name = "train-zero3-gather";
          gather = dist::new_process_group(env, store, backend, go);
        }
        r[static_cast<size_t>(rank)] = models::train(o, borrow(pg), gather);
      },
      dist::ProcessGroupOptions{}, backend);
  return r;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }

void expect_stages_equal(const std::function<models::TrainOptions()>& make, const std::string& backend = "shm") {
  std::vector<models::TrainResult> plain;
  for (int zero : {0, 1, 2, 3}) {
    SCOPED_TRACE("--zero " + std::to_string(zero) + " on " + backend);
    auto r = run_world(
        2,
        [&](int) {
          models::TrainOptions o = make();
          o.zero = zero;
          return o;
        },
        backend);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(r[rank].steps_done, r[0].steps_done);
      EXPECT_TRUE(r[rank].final_params == r[0].final_params) << "rank " << rank << " differs from rank 0";
    }
    if (zero == 0) {
      plain = r;
      continue;
    }
    ASSERT_EQ(r[0].final_params.size(), plain[0].final_params.size());
    EXPECT_LT(ddp::testing::max_relative_difference(r[0].final_params, plain[0].final_params), 1e-12);
    EXPECT_LT(relative(r[0].final_train_loss, plain[0].final_train_loss), 1e-12);
    EXPECT_LT(relative(r[0].val_loss, plain[0].val_loss), 1e-12);
    if (!plain[0].sample_text.empty()) {
      EXPECT_EQ(r[0].sample_text, plain[0].sample_text);
    }
    if (zero >= 2) {
      EXPECT_NE(r[0].memory_table.find("ZeRO stage " + std::to_string(zero)), std::string::npos)
          << r[0].memory_table;
      EXPECT_LT(r[0].optimizer_state_bytes, plain[0].optimizer_state_bytes) << "the state is not sharded";
    }
  }
}

// The error of every rank (empty: none).
std::vector<std::string> errors_of(int world, const models::TrainOptions& o, bool gather_group = true) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  dist::run_threads(
      world,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        std::shared_ptr<dist::ProcessGroup> gather;
        if (gather_group && o.zero == 3) {
          dist::DistEnv env;
          env.rank = rank;
          env.world_size = world;
          dist::ProcessGroupOptions go;
          go.name = "train-zero3-gather";
          gather = dist::new_process_group(env, store, "shm", go);
        }
        try {
          models::train(o, borrow(pg), gather);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(rank)] = e.what();
        }
      },
      dist::ProcessGroupOptions{}, "shm");
  return errors;
}

void expect_refused(const models::TrainOptions& o, const std::vector<std::string>& parts, bool gather = true) {
  const auto errors = errors_of(2, o, gather);
  for (int rank = 0; rank < 2; ++rank)
    for (const std::string& part : parts)
      EXPECT_NE(errors[rank].find(part), std::string::npos)
          << "rank " << rank << " error: '" << errors[rank] << "' lacks '" << part << "'";
}
}  // namespace

TEST(TrainZero, Stages1To3EqualPlainDdpForTheMlp) {
  expect_stages_equal([] { return tiny("mlp"); });
}

TEST(TrainZero, Stages1To3EqualPlainDdpForTheMlpWithSgdAndAccumulationOnGloo) {
  expect_stages_equal(
      [] {
        models::TrainOptions o = tiny("mlp");
        o.optimizer = "sgd";
        o.momentum = 0.9;
        o.grad_accum = 2;  // the first micro-batch under no_sync
        o.steps = 3;
        return o;
      },
      "gloo");
}

TEST(TrainZero, Stages1To3EqualPlainDdpForTheGpt) {
  expect_stages_equal([] { return tiny("gpt"); });
}

// Uneven steps: the ranks that finish early shadow the others under Join (ZeRO-3: its gathers on the gather
// group), and the run equals plain DDP's uneven run.
TEST(TrainZero, UnevenStepsUnderJoinEqualPlainDdp) {
  std::vector<std::vector<double>> plain;
  for (int zero : {0, 2, 3}) {
    SCOPED_TRACE("--zero " + std::to_string(zero));
    auto r = run_world(2, [&](int) {
      models::TrainOptions o = tiny("mlp");
      o.steps = 6;
      o.uneven_steps = 2;
      o.zero = zero;
      return o;
    });
    EXPECT_EQ(r[0].steps_done, 6);
    EXPECT_EQ(r[1].steps_done, 4);
    EXPECT_TRUE(r[1].final_params == r[0].final_params);
    if (zero == 0)
      plain = r[0].final_params;
    else
      EXPECT_LT(ddp::testing::max_relative_difference(r[0].final_params, plain), 1e-12);
  }
}

TEST(TrainZero, WhatStages2And3DoNotSupportIsRefusedOnEveryRank) {
  for (int zero : {2, 3}) {
    SCOPED_TRACE("--zero " + std::to_string(zero));
    const std::string z = "--zero " + std::to_string(zero);
    models::TrainOptions o = tiny("mlp");
    o.zero = zero;
    o.comm_hook = "powersgd";
    expect_refused(o, {z, "--comm-hook powersgd", "drop --comm-hook"});
    o = tiny("mlp");
    o.zero = zero;
    o.gradient_as_bucket_view = true;
    expect_refused(o, {z, "--gradient-as-bucket-view", "drop the flag"});
    o = tiny("cnn");
    o.zero = zero;
    o.sync_bn = true;
    expect_refused(o, {z, "--sync-bn", "drop --sync-bn"});
    o = tiny("mlp");
    o.zero = zero;
    o.resume = "/nonexistent/ckpt.safetensors";
    expect_refused(o, {z, "cannot --resume", "--zero 0 or 1"});
  }
  models::TrainOptions o = tiny("mlp");
  o.zero = 4;
  expect_refused(o, {"--zero must be 0, 1, 2 or 3, got 4"});
  // A caller of train() that gives no gather group: ZeRO-3 at world 2 is refused.
  o = tiny("mlp");
  o.zero = 3;
  expect_refused(o, {"--zero 3 needs a second process group", "--zero 2"}, /*gather=*/false);
}

// A checkpoint of --zero 2/3 holds the whole model (gathered), and no optimizer state.
TEST(TrainZero, Zero3CheckpointHoldsTheWholeModel) {
  const std::string dir = ::testing::TempDir() + "train_zero3_ckpt_" + std::to_string(::getpid());
  auto r = run_world(2, [&](int) {
    models::TrainOptions o = tiny("mlp");
    o.zero = 3;
    o.checkpoint_dir = dir;
    return o;
  });
  ASSERT_FALSE(r[0].checkpoint_path.empty());
  // Resumed with --zero 0 and --reset-optimizer, one more step runs from the saved parameters.
  auto more = run_world(2, [&](int) {
    models::TrainOptions o = tiny("mlp");
    o.steps = 6;
    o.resume = r[0].checkpoint_path;
    o.reset_optimizer = true;
    return o;
  });
  EXPECT_EQ(more[0].steps_done, 6);
}

// The program: "--zero 2", "--zero=3" and a bare "--zero" (stage 1), and the memory account in the summary.
TEST(TrainZero, TheProgramTakesTheStageAndPrintsTheMemoryAccount) {
  auto run = [](const std::vector<std::string>& zero_flags) {
    std::vector<std::string> argv = {ddp::testing::ddprun_path(), "--standalone", "--nproc-per-node", "2",
                                     std::string(DDP_BIN_DIR) + "/train", "--model", "mlp", "--data",
                                     "synthetic", "--hidden", "16", "--synthetic-samples", "128", "--steps",
                                     "2", "--batch-size", "8", "--eval-batches", "1", "--log-interval", "0",
                                     "--threads", "1"};
    argv.insert(argv.end(), zero_flags.begin(), zero_flags.end());
    ddp::testing::ProcessOptions po;
    po.set_env = {{"OPENBLAS_NUM_THREADS", "1"}};
    po.timeout_s = 60;
    return ddp::testing::run_process(argv, po);
  };
  auto two = run({"--zero", "2"});
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  EXPECT_NE(two.out.find("memory of rank 0 (ZeRO-2)"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("ZeRO formula"), std::string::npos) << two.out;
  auto three = run({"--zero=3"});
  ASSERT_EQ(three.exit_code, 0) << three.out << three.err;
  EXPECT_NE(three.out.find("memory of rank 0 (ZeRO-3)"), std::string::npos) << three.out;
  auto one = run({"--zero"});
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  EXPECT_NE(one.out.find("(its ZeRO shard)"), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find("memory of rank 0"), std::string::npos) << one.out;
  auto hook = run({"--zero", "3", "--comm-hook", "powersgd"});
  EXPECT_NE(hook.exit_code, 0);
  EXPECT_NE((hook.out + hook.err).find("--zero 3 does not take --comm-hook powersgd"), std::string::npos)
      << hook.out << hook.err;
}
