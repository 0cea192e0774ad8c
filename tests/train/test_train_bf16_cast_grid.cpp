// test_train_bf16_cast_grid.cpp - the once-per-step bf16 weight cast (ops::Bf16WeightCast, opened by
// models::train_step) and the fused bf16 MLP under every way `train` composes them, generated, not listed:
// ZeRO stage (0-3) x gradient accumulation (1, 3) x static_graph x clipping x uneven data with Join x the
// deterministic mode, a bf16 GPT at world 2 over shm. Each configuration runs twice - the weights cast once
// per step, and converted on every use (DDP_BF16_WEIGHT_CACHE=0, the behaviour before the cast) - and the
// two runs end bitwise alike on every rank (parameters, losses), or both refuse with the same error on every
// rank. Where a weight is used more than once in a step, the cached run converts fewer weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/train.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;

namespace {
constexpr int kWorld = 2;

struct Pattern {
  int zero = 0;
  int64_t grad_accum = 1;
  bool static_graph = false;
  bool clip = false;
  bool uneven = false;
  bool deterministic = false;
  std::string name() const {
    return "zero " + std::to_string(zero) + ", grad_accum " + std::to_string(grad_accum) +
           (static_graph ? ", static_graph" : "") + (clip ? ", clip" : "") + (uneven ? ", uneven + join" : "") +
           (deterministic ? ", deterministic" : "");
  }
};

models::TrainOptions options_for(const Pattern& p) {
  models::TrainOptions o;
  o.model = "gpt";
  o.device = "cpu";  // the ranks' world is shm: "auto" took the GPU where one exists and every run refused
  o.data = "synthetic";
  o.dtype = "bfloat16";
  o.quiet = true;
  o.steps = 4;
  o.warmup_steps = 1;
  o.batch_size = 2;
  o.context = 8;
  o.d_model = 16;
  o.n_head = 2;
  o.n_layer = 2;
  o.synthetic_samples = 256;  // a validation split that fills a deterministic step's batch
  o.sample_tokens = 0;
  o.eval_batches = 1;
  o.eval_interval = 0;
  o.lr = 1e-2;
  o.optimizer = "adamw";
  o.bucket_cap_mb = 0.004;  // several buckets
  o.first_bucket_mb = 0.004;
  o.zero = p.zero;
  o.grad_accum = p.grad_accum;
  o.static_graph = p.static_graph;
  o.clip_grad = p.clip ? 0.05 : 0.0;
  o.uneven_steps = p.uneven ? 1 : 0;
  o.deterministic = p.deterministic;
  o.micro_batches = 4;
  return o;
}

struct RankOutcome {
  std::string error;
  std::vector<std::vector<double>> params;
  double train_loss = 0, val_loss = 0;
  int64_t steps = 0;
};

struct GridRun {
  std::vector<RankOutcome> ranks;
  int64_t casts = 0;  // bf16 weight conversions of the whole run (both ranks)
};

GridRun run_grid(const Pattern& p, bool cache) {
  if (cache)
    ::unsetenv("DDP_BF16_WEIGHT_CACHE");
  else
    ::setenv("DDP_BF16_WEIGHT_CACHE", "0", 1);
  GridRun r;
  r.ranks.resize(kWorld);
  const int64_t before = ops::detail::bf16_weight_casts();
  dist::run_threads(
      kWorld,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        const models::TrainOptions o = options_for(p);
        auto gather = ddp::testing::zero3_gather_group(o.zero, rank, kWorld, store, "shm");
        RankOutcome& out = r.ranks[static_cast<size_t>(rank)];
        try {
          const models::TrainResult t =
              models::train(o, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg),
                            gather);
          out.params = t.final_params;
          out.train_loss = t.final_train_loss;
          out.val_loss = t.val_loss;
          out.steps = t.steps_done;
        } catch (const std::exception& e) {
          out.error = e.what();
        }
      },
      dist::ProcessGroupOptions{}, "shm");
  r.casts = ops::detail::bf16_weight_casts() - before;
  ::unsetenv("DDP_BF16_WEIGHT_CACHE");
  return r;
}

std::vector<Pattern> patterns(int zero) {
  std::vector<Pattern> out;
  for (int64_t accum : {1, 3})
    for (bool static_graph : {false, true})
      for (bool clip : {false, true})
        for (bool uneven : {false, true})
          for (bool deterministic : {false, true}) out.push_back({zero, accum, static_graph, clip, uneven, deterministic});
  return out;
}
}  // namespace

class TrainBf16CastGrid : public ::testing::TestWithParam<int> {};  // the parameter: the ZeRO stage

TEST_P(TrainBf16CastGrid, CastOncePerStepEqualsConvertingOnEveryUseOnEveryRank) {
  int trained = 0, refused = 0;
  std::string first_refusal;
  for (const Pattern& p : patterns(GetParam())) {
    SCOPED_TRACE(p.name());
    const GridRun cached = run_grid(p, true), every_use = run_grid(p, false);
    for (int rank = 0; rank < kWorld; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      const RankOutcome& a = cached.ranks[static_cast<size_t>(rank)];
      const RankOutcome& b = every_use.ranks[static_cast<size_t>(rank)];
      EXPECT_EQ(a.error, b.error) << "refused one way and not the other";
      EXPECT_EQ(a.error.empty(), cached.ranks[0].error.empty()) << "refused on some ranks only: " << a.error;
      if (!a.error.empty()) continue;
      EXPECT_EQ(a.steps, b.steps);
      EXPECT_TRUE(a.params == b.params) << "the cast changed the parameters";
      EXPECT_EQ(a.train_loss, b.train_loss);
      EXPECT_EQ(a.val_loss, b.val_loss);
      EXPECT_TRUE(std::isfinite(a.val_loss)) << "no validation loss: " << a.val_loss;
      EXPECT_TRUE(a.params == cached.ranks[0].params) << "the ranks' parameters differ";
    }
    if (!cached.ranks[0].error.empty()) {
      if (first_refusal.empty()) first_refusal = p.name() + ": " + cached.ranks[0].error;
      ++refused;
      continue;
    }
    ++trained;
    EXPECT_GT(cached.casts, 0) << "no bf16 weight was converted: not a bf16 run";
    EXPECT_LE(cached.casts, every_use.casts);
    // Several micro-batches per step on a rank reuse each weight: the cache must have saved conversions
    // (ZeRO-3's normal step does not cache: its gathered parameters are freed after each use).
    const bool reuse = p.deterministic || p.grad_accum > 1;
    if (reuse && (p.zero < 3 || p.deterministic)) EXPECT_LT(cached.casts, every_use.casts);
  }
  // Every stage trains most of the grid; the deterministic mode refuses gradient accumulation by name.
  std::printf("ZeRO stage %d: %d configurations trained alike both ways, %d refused alike\n", GetParam(), trained,
              refused);
  EXPECT_GE(trained, 24) << refused << " configurations refused; the first: " << first_refusal;
}

INSTANTIATE_TEST_SUITE_P(Zero, TrainBf16CastGrid, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "Stage" + std::to_string(info.param); });
