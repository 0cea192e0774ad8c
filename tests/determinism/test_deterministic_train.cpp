// test_deterministic_train.cpp - `train --deterministic` (docs/determinism.md): the parameters (and BatchNorm's
// running statistics) after 20 steps are bitwise those of world 1, generated from one table - model (mlp, cnn with
// BatchNorm, gpt) x dtype (float32, bf16 compute) x world (2, 3, 4) x backend (shm, gloo, hier) x threads (1, 2
// with every kernel split forced) x ZeRO (0-3) x find_unused_parameters x bucket cap - each row drawn by a seeded
// generator so that every value of every feature appears for every model; uneven inputs (Join built in) equal
// across backends, threads and ZeRO at their world; dropout and static_graph; a stop at world 2 resumed at world 3
// equals the run that never stopped; the normal mode differs in float32 (so this test can fail); every refusal
// names its flag. A failure prints the first differing parameter, its element and the two values.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>

#include "kernels/cpu/parallel.h"
#include "models/train.h"
#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

struct Row {
  std::string model, dtype;
  int world = 1;
  std::string backend = "shm";
  int threads = 1;
  int zero = 0;
  bool unused = false;
  double bucket_cap_mb = 25;
  int64_t uneven = 0;
  std::string str() const {
    return model + " " + dtype + " world " + std::to_string(world) + " " + backend + " threads " +
           std::to_string(threads) + " zero " + std::to_string(zero) + (unused ? " find_unused" : "") +
           " cap " + std::to_string(bucket_cap_mb) + (uneven ? " uneven " + std::to_string(uneven) : "");
  }
};

models::TrainOptions options_of(const Row& r) {
  models::TrainOptions o;
  o.model = r.model;
  o.data = "synthetic";
  o.dtype = r.dtype;
  o.quiet = true;
  o.steps = 20;
  o.warmup_steps = 2;
  o.batch_size = 4;
  o.deterministic = true;
  o.micro_batches = 4;
  o.eval_interval = 0;
  o.eval_batches = 1;
  o.sample_tokens = 0;
  o.synthetic_samples = 512;
  o.hidden = 24;
  o.context = 16;
  o.d_model = 32;
  o.n_head = 2;
  o.n_layer = 1;
  o.lr = 3e-3;
  o.weight_decay = 0.01;
  o.clip_grad = 0.5;  // clips: the norm is taken over the exact mean
  o.zero = r.zero;
  o.find_unused_parameters = r.unused;
  o.bucket_cap_mb = r.bucket_cap_mb;
  o.first_bucket_mb = std::min(1.0, r.bucket_cap_mb);
  o.uneven_steps = r.uneven;
  return o;
}

// Every rank's final parameters (each rank checked against rank 0 too).
std::vector<std::vector<double>> run(const Row& r, const std::function<void(models::TrainOptions&)>& edit = {}) {
  std::vector<models::TrainResult> res(static_cast<size_t>(r.world));
  kernels::cpu::set_thread_budget(r.threads);
  kernels::cpu::set_parallel_split_always(r.threads > 1);  // every pool kernel split, whatever its size
  dist::ProcessGroupOptions pgo;
  pgo.timeout = 60s;
  dist::run_threads(
      r.world,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        models::TrainOptions o = options_of(r);
        if (edit) edit(o);
        // ZeRO-3's gathers: a second group, as `train` makes it
        auto gather = ddp::testing::zero3_gather_group(r.world > 1 ? o.zero : 0, rank, r.world, store, r.backend, pgo,
                                                       "deterministic-zero3-gather");
        res[static_cast<size_t>(rank)] = models::train(o, borrow(pg), gather);
      },
      pgo, r.backend);
  kernels::cpu::set_parallel_split_always(false);
  kernels::cpu::set_thread_budget(1);
  for (int k = 1; k < r.world; ++k)
    EXPECT_TRUE(res[static_cast<size_t>(k)].final_params == res[0].final_params) << "rank " << k << " of " << r.str();
  // The parameters, then the floating-point buffers (the cnn's BatchNorm running statistics).
  std::vector<std::vector<double>> all = res[0].final_params;
  all.insert(all.end(), res[0].final_buffers.begin(), res[0].final_buffers.end());
  return all;
}

// "" when bitwise equal, else the first differing parameter (or buffer: numbered after the parameters),
// element and the two values.
std::string first_difference(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  if (a.size() != b.size()) return "different parameter counts";
  for (size_t p = 0; p < a.size(); ++p)
    for (size_t i = 0; i < a[p].size(); ++i)
      if (std::memcmp(&a[p][i], &b[p][i], sizeof(double)) != 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "parameter %zu element %zu: %.17g vs %.17g", p, i, a[p][i], b[p][i]);
        return buf;
      }
  return "";
}

// The table: for each model and dtype, rows drawn so that each world, backend, thread count, ZeRO stage,
// find_unused setting and bucket cap appears (the generator cycles each feature with a different period).
std::vector<Row> generated_rows(const std::string& model, const std::string& dtype, uint64_t seed) {
  const std::vector<int> worlds{2, 3, 4};
  const std::vector<std::string> backends{"shm", "gloo", "hier"};
  const std::vector<double> caps{0.001, 25};  // a bucket per parameter or so; one bucket
  std::mt19937_64 rng(seed);
  std::vector<Row> rows;
  for (int i = 0; i < 6; ++i) {
    Row r{model, dtype};
    r.world = worlds[static_cast<size_t>(i) % 3];
    r.backend = backends[(static_cast<size_t>(i) + rng() % 3) % 3];
    r.threads = 1 + i % 2;
    r.zero = (3 * i) % 4;  // 0, 3, 2, 1, 0, 3
    r.unused = (i / 3) % 2 == 1;
    r.bucket_cap_mb = caps[(static_cast<size_t>(i) + 1) % 2];
    rows.push_back(r);
  }
  return rows;
}

class DeterministicTrain : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

}  // namespace

TEST_P(DeterministicTrain, ParametersAfter20StepsAreBitwiseThoseOfWorld1) {
  const auto& [model, dtype] = GetParam();
  const Row reference_row{model, dtype};
  const auto reference = run(reference_row);
  for (const Row& r : generated_rows(model, dtype, std::hash<std::string>{}(model + dtype))) {
    SCOPED_TRACE(r.str());
    const std::string diff = first_difference(run(r), reference);
    EXPECT_EQ(diff, "") << r.str() << " differs from world 1: " << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DeterministicTrain,
                         ::testing::Combine(::testing::Values("mlp", "cnn", "gpt"),
                                            ::testing::Values("float32", "bfloat16")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// Dropout draws from a stream of the micro-batch's global number, and static_graph changes nothing the mode
// uses: the gpt with both at worlds 3 (gloo) and 4 (hier) gives world 1's bits.
TEST(DeterministicTrainDropout, DropoutAndStaticGraphGiveTheBitsOfWorld1) {
  auto edit = [](models::TrainOptions& o) {
    o.dropout = 0.1;
    o.static_graph = true;
  };
  const auto reference = run(Row{"gpt", "float32"}, edit);
  const auto without_dropout = run(Row{"gpt", "float32"});
  EXPECT_NE(first_difference(reference, without_dropout), "") << "dropout 0.1 changed nothing";
  EXPECT_EQ(first_difference(run(Row{"gpt", "float32", 3, "gloo"}, edit), reference), "");
  EXPECT_EQ(first_difference(run(Row{"gpt", "float32", 4, "hier", 2}, edit), reference), "");
}

// Uneven inputs: rank r runs 3r steps fewer; the others' steps average what the step still has. The same
// world gives the same bits on every backend, thread count and ZeRO stage, and differs from the even run.
TEST(DeterministicTrainJoin, UnevenInputsGiveTheSameBitsAcrossBackendsThreadsAndZero) {
  for (int world : {2, 3}) {
    Row base{"mlp", "float32", world, "shm"};
    base.uneven = 3;
    const auto first = run(base);
    for (auto [backend, threads, zero] : {std::tuple{"gloo", 2, 1}, std::tuple{"hier", 1, 3}, std::tuple{"shm", 2, 2}}) {
      Row r = base;
      r.backend = backend;
      r.threads = threads;
      r.zero = zero;
      SCOPED_TRACE(r.str());
      EXPECT_EQ(first_difference(run(r), first), "");
    }
    Row even = base;
    even.uneven = 0;
    EXPECT_NE(first_difference(run(even), first), "") << "uneven inputs changed nothing at world " << world;
  }
}

// Stopped after 8 steps at world 2 (its checkpoint), resumed at world 3 to step 20: the bits of world 1
// without a stop. The gpt, AdamW: parameters, moments, step count and the loader position all carry over.
TEST(DeterministicTrainResume, StopAtWorld2ResumeAtWorld3EqualsTheRunThatNeverStopped) {
  const auto dir = std::filesystem::temp_directory_path() / ("ddp_det_resume_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto reference = run(Row{"gpt", "float32"});
  Row first{"gpt", "float32", 2, "shm"};
  (void)run(first, [&](models::TrainOptions& o) {
    o.checkpoint_dir = dir.string();
    o.stop_after = 8;
  });
  Row second{"gpt", "float32", 3, "gloo"};
  const auto resumed = run(second, [&](models::TrainOptions& o) {
    o.checkpoint_dir = dir.string();
    o.resume = "auto";
  });
  EXPECT_EQ(first_difference(resumed, reference), "");
  std::filesystem::remove_all(dir);
}

// A checkpoint of one mode resumed in the other: refused by name (their loader positions count differently).
TEST(DeterministicTrainResume, ACheckpointOfTheOtherModeIsRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("ddp_det_mode_" + std::to_string(::getpid()));
  for (bool first_deterministic : {true, false}) {
    std::filesystem::remove_all(dir);
    Row r{"mlp", "float32", 2, "shm"};
    (void)run(r, [&](models::TrainOptions& o) {
      o.deterministic = first_deterministic;
      o.checkpoint_dir = dir.string();
      o.stop_after = 3;
    });
    try {
      (void)run(r, [&](models::TrainOptions& o) {
        o.deterministic = !first_deterministic;
        o.checkpoint_dir = dir.string();
        o.resume = "auto";
      });
      ADD_FAILURE() << "resumed across the modes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--deterministic"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

// Without --deterministic, float32 at world 1 and world 2 with the same global batch differ: the test above
// can fail, and the mode is what makes them equal.
TEST(DeterministicTrainControl, TheNormalModeDiffersAcrossWorldSizesInFloat32) {
  auto normal = [](int world) {
    Row r{"gpt", "float32", world, "shm"};
    return run(r, [&](models::TrainOptions& o) {
      o.deterministic = false;
      o.batch_size = 16 / world;  // the same 16 rows per step
    });
  };
  EXPECT_NE(first_difference(normal(1), normal(2)), "");
}

// Each refusal names its flag and the way out, on every rank.
TEST(DeterministicTrainRefusals, EachConflictingFlagIsNamed) {
  struct Case {
    std::function<void(models::TrainOptions&)> edit;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[](auto& o) { o.grad_accum = 2; }, "--grad-accum"},
      {[](auto& o) { o.micro_batches = 1; }, "--micro-batches"},
      {[](auto& o) { o.gradient_as_bucket_view = true; }, "--gradient-as-bucket-view"},
      {[](auto& o) {
         o.model = "cnn";
         o.sync_bn = true;
       },
       "--sync-bn"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> errors(2);
    dist::run_threads(
        2,
        [&](int rank, dist::ProcessGroup& pg) {
          models::TrainOptions o = options_of(Row{"mlp", "float32", 2});
          c.edit(o);
          try {
            models::train(o, borrow(pg));
          } catch (const Error& e) {
            errors[static_cast<size_t>(rank)] = e.what();
          }
        },
        dist::ProcessGroupOptions{}, "shm");
    for (const auto& e : errors) {
      EXPECT_NE(e.find(c.needle), std::string::npos) << c.needle << ": " << e;
      EXPECT_NE(e.find("--deterministic"), std::string::npos) << e;
    }
  }
}
