// test_resume_nothing_to_do.cpp - a resume whose checkpoint is at or past the run's last step trains nothing
// and returns on every rank (worlds 1-3, exactly at the last step and past it); ranks that resumed different
// steps, only some of them at the end, all fail with the same error naming it - none returns alone and
// leaves the others waiting in a collective.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "models/train.h"
#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"

using namespace ddp;

namespace {
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

models::TrainOptions tiny(const std::string& dir, int64_t steps) {
  models::TrainOptions o;
  o.model = "mlp";
  o.data = "synthetic";
  o.quiet = true;
  o.steps = steps;
  o.warmup_steps = 1;
  o.batch_size = 8;
  o.eval_batches = 1;
  o.eval_interval = 0;
  o.synthetic_samples = 64;
  o.hidden = 8;
  o.sample_tokens = 0;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = 2;
  return o;
}

std::string fresh_dir(const std::string& name) {
  const auto p = std::filesystem::temp_directory_path() / ("ddp_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}
}  // namespace

TEST(ResumeNothingToDo, EveryRankReturnsWithoutTrainingAtOrPastTheLastStep) {
  for (int world = 1; world <= 3; ++world) {
    const std::string dir = fresh_dir("nothing_to_do_w" + std::to_string(world));
    dist::run_threads(world, [&](int, dist::ProcessGroup& pg) { models::train(tiny(dir, 4), borrow(pg)); });
    for (int64_t steps : {4, 3, 1}) {  // exactly at the last step, past it, far past it
      models::TrainOptions o = tiny(dir, steps);
      o.resume = dir + "/ckpt-step4.safetensors";
      std::vector<models::TrainResult> results(static_cast<size_t>(world));
      dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
        results[static_cast<size_t>(rank)] = models::train(o, borrow(pg));
      });
      for (const auto& r : results) {
        EXPECT_EQ(r.steps_done, 4) << "world " << world << ", --steps " << steps;
        EXPECT_FALSE(r.final_params.empty());
        EXPECT_TRUE(r.final_params == results[0].final_params) << "world " << world;
      }
    }
    std::filesystem::remove_all(dir);
  }
}

TEST(ResumeNothingToDo, RanksThatResumedDifferentStepsAllFailNamingIt) {
  for (int world = 2; world <= 3; ++world) {
    for (int done_rank = 0; done_rank < world; ++done_rank) {  // the one rank whose checkpoint is at the end
      const std::string dir = fresh_dir("resume_disagree");
      dist::run_threads(world, [&](int, dist::ProcessGroup& pg) { models::train(tiny(dir, 4), borrow(pg)); });
      std::mutex mu;
      std::vector<std::string> errors(static_cast<size_t>(world));
      dist::run_threads(world, [&](int rank, dist::ProcessGroup& pg) {
        models::TrainOptions o = tiny(dir, 4);
        o.checkpoint_dir = "";
        o.resume = dir + (rank == done_rank ? "/ckpt-step4.safetensors" : "/ckpt-step2.safetensors");
        try {
          models::train(o, borrow(pg));
        } catch (const Error& e) {
          std::lock_guard<std::mutex> g(mu);
          errors[static_cast<size_t>(rank)] = e.what();
        }
      });
      for (int r = 0; r < world; ++r)
        EXPECT_NE(errors[static_cast<size_t>(r)].find("the ranks resumed different steps: on 1 of " +
                                                      std::to_string(world) + " ranks"),
                  std::string::npos)
            << "world " << world << ", rank " << r << " (rank " << done_rank
            << " at the end): " << errors[static_cast<size_t>(r)];
      std::filesystem::remove_all(dir);
    }
  }
}
