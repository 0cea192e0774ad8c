// test_step_explain.cpp - the text of "explain" (step_explain.h) on hand-made records with known answers:
// the common-clock times, which rank issued each bucket last and how long the other waited, the slowest
// rank, parameters without a gradient on one rank or on all, a Join shadow, the what-if table; and
// DDP_EXPLAIN's parsing; and on thread ranks, that ranks asked to explain different iterations follow rank 0.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <string>

#include "models/branchy.h"
#include "runtime/autograd/engine.h"
#include "runtime/core/error.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/step_explain.h"
#include "runtime/distributed/local_world.h"
#include "runtime/nn/module.h"
#include "runtime/ops/loss.h"

using namespace ddp;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

BucketTiming bucket(size_t index, double ready_ms, double launched_ms, double completed_ms) {
  BucketTiming t;
  t.index = index;
  t.ready_s = ready_ms * 1e-3;
  t.launched_s = launched_ms * 1e-3;
  t.completed_s = completed_ms * 1e-3;
  return t;
}

// Two ranks, two buckets. Rank 1's forward ends 1 ms after rank 0's (on rank 0's clock); its times are then
// +1 ms on the common axis.
std::vector<ExplainRank> two_ranks() {
  ExplainRank r0, r1;
  r0.rank = 0;
  r0.forward_end_s = 10.000;
  r0.backward_compute_s = 2e-3;
  r0.exposed_s = 1.5e-3;
  r0.buckets = {bucket(0, 0.5, 0.5, 2.0), bucket(1, 2.0, 2.0, 3.5)};
  r0.no_gradient = {"head.extra", "expert1.weight"};
  r1.rank = 1;
  r1.forward_end_s = 10.001;
  r1.clock_error_s = 20e-6;
  r1.backward_compute_s = 2e-3;
  r1.exposed_s = 0.5e-3;
  r1.buckets = {bucket(0, 0.5, 0.5, 1.0), bucket(1, 2.0, 2.2, 2.5)};
  r1.no_gradient = {"head.extra"};
  return {r0, r1};
}

const std::vector<ExplainBucket> kLayout = {{2048, 2, "fc2.bias", "fc2.weight"},
                                            {4 << 20, 1, "fc1.weight", "fc1.weight"}};

}  // namespace

TEST(StepExplain, AKnownStepOnTwoRanks) {
  const std::string t = explain_iteration("step", 7, kLayout, two_ranks());
  EXPECT_TRUE(has(t,
                  "explain step 7: 2 ranks, 2 buckets. Times in ms from the first forward end (rank 0), all "
                  "ranks on rank 0's clock (offsets within +-0.020 ms).\n"))
      << t;
  EXPECT_TRUE(
      has(t,
          "rank 0: forward ended at 0.000, backward computed until 2.000 (2.000 ms), then waited 1.500 "
          "ms for communication (exposed), bucket 1 finishing last.\n"))
      << t;
  EXPECT_TRUE(
      has(t,
          "  bucket 0: 2.0 KiB, 2 parameters (fc2.bias .. fc2.weight): last gradient at 0.500, issued "
          "at 0.500, done at 2.000 (1.500 ms in flight)\n"))
      << t;
  EXPECT_TRUE(has(t, "  bucket 1: 4.00 MiB, 1 parameter (fc1.weight): last gradient at 2.000")) << t;
  // Rank 1's times are shifted by its later forward end; bucket 1 went out 0.2 ms after it was full.
  EXPECT_TRUE(
      has(t, "rank 1: forward ended at 1.000, backward computed until 3.000 (2.000 ms), then waited 0.500"))
      << t;
  EXPECT_TRUE(
      has(t,
          "last gradient at 3.000, issued at 3.200, done at 3.500 (0.300 ms in flight; issued 0.200 ms "
          "after it was full: buckets go out in order)"))
      << t;
  EXPECT_TRUE(has(t,
                  "slowest: rank 1 finished backward 1.000 ms after rank 0; rank 0 waited 1.500 ms, rank 1 "
                  "0.500 ms.\n"))
      << t;
  EXPECT_TRUE(
      has(t, "  bucket 0 could start at 1.500, when rank 1 issued it last (rank 0 had waited 1.000 ms)\n"))
      << t;
  EXPECT_TRUE(
      has(t, "  bucket 1 could start at 3.200, when rank 1 issued it last (rank 0 had waited 1.200 ms)\n"))
      << t;
  EXPECT_TRUE(has(t, "  no gradient on this rank (all-reduced as zeros): head.extra expert1.weight\n")) << t;
  EXPECT_TRUE(has(t, "unused parameters (no gradient on any rank): head.extra\n")) << t;
}

TEST(StepExplain, ASlownessWithinTheClockErrorIsSaidToBeNone) {
  auto ranks = two_ranks();
  ranks[1].forward_end_s = 10.0000100;  // 10 us later, bound 20 us
  const std::string t = explain_iteration("iteration", 1, kLayout, ranks);
  EXPECT_TRUE(has(t, "explain iteration 1: 2 ranks")) << t;
  EXPECT_TRUE(has(t, "(within the clocks' error: no rank was clearly slower)")) << t;
}

TEST(StepExplain, AJoinShadowAndAWorldOfOne) {
  auto ranks = two_ranks();
  ranks[1].shadow = true;
  ranks[1].buckets.clear();
  const std::string t = explain_iteration("step", 3, kLayout, ranks);
  EXPECT_TRUE(has(t, "rank 1: had no batch (Join): it shadowed the others' all-reduces with zeros.\n")) << t;
  EXPECT_FALSE(has(t, "slowest")) << t;
  EXPECT_TRUE(has(t, "unused parameters (no gradient on any rank): head.extra expert1.weight\n")) << t;

  const std::string one = explain_iteration("step", 3, kLayout, {two_ranks()[0]});
  EXPECT_TRUE(has(one, "explain step 3: 1 rank, 2 buckets")) << one;
  EXPECT_FALSE(has(one, "offsets within")) << one;
  EXPECT_FALSE(has(one, "could start")) << one;
}

TEST(StepExplain, TheWhatIfTableMarksThisRunAndTheBest) {
  ExplainWhatIf w;
  w.current_cap_mb = 25;
  w.basis = "a test network";
  w.rows = {{12.5, 4, 2e-3, 9e-3}, {25, 2, 3e-3, 8e-3}, {50, 1, 5e-3, 10e-3}};
  const std::string t = explain_iteration("step", 2, kLayout, two_ranks(), &w);
  EXPECT_TRUE(has(t, "what-if (bucket simulator, a test network):\n")) << t;
  EXPECT_TRUE(has(t,
                  "  cap   25.000 MiB:   2 buckets, exposed 3.000 ms, backward + exposed 8.000 ms  (this "
                  "run)  <- best\n"))
      << t;
  EXPECT_TRUE(has(t, "  cap   12.500 MiB:   4 buckets, exposed 2.000 ms, backward + exposed 9.000 ms\n"))
      << t;
  w.rows[0].step_s = 8e-3;  // a tie with this run: no change is best
  const std::string tie = explain_iteration("step", 2, kLayout, two_ranks(), &w);
  EXPECT_TRUE(has(tie, "8.000 ms  (this run)  <- best\n")) << tie;
  EXPECT_EQ(count_of(tie, "<- best"), 1u) << tie;
  ExplainWhatIf none;
  none.basis = "no what-if: nothing measured";
  EXPECT_TRUE(has(explain_iteration("step", 2, kLayout, two_ranks(), &none),
                  "what-if: no what-if: nothing measured\n"));
}

TEST(StepExplain, AGivenLayoutOfReduceScattersOffersNoCap) {
  ExplainWhatIf w;
  w.current_cap_mb = 25;
  w.basis = "a test network";
  w.collective = "reduce-scatter";
  w.layout_given = true;
  w.rows = {{0, 2, 3e-3, 8e-3}};
  const std::string t = explain_iteration("step", 2, kLayout, two_ranks(), &w);
  EXPECT_TRUE(has(t,
                  "explain step 2: 2 ranks, 2 buckets (reduce-scattered); the buckets are the given layout "
                  "(ZeRO-3: one per unit), the bucket cap does not shape them. Times"))
      << t;
  EXPECT_TRUE(has(t, "  this run: 2 buckets, exposed 3.000 ms, backward + exposed 8.000 ms\n")) << t;
  EXPECT_FALSE(has(t, "MiB:")) << t;
  EXPECT_FALSE(has(t, "<- best")) << t;
  EXPECT_FALSE(has(t, "all-reduce")) << t;
}

TEST(StepExplain, ARecordThatDoesNotMatchTheLayoutIsAnError) {
  auto ranks = two_ranks();
  ranks[1].buckets.pop_back();
  try {
    explain_iteration("step", 1, kLayout, ranks);
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "rank 1 recorded 1 buckets, the layout has 2")) << e.what();
  }
}

TEST(StepExplain, DdpExplainIsAWholeNumberOrUnset) {
  unsetenv("DDP_EXPLAIN");
  EXPECT_EQ(explain_iteration_from_env(), 0);
  setenv("DDP_EXPLAIN", "", 1);
  EXPECT_EQ(explain_iteration_from_env(), 0);
  setenv("DDP_EXPLAIN", "12", 1);
  EXPECT_EQ(explain_iteration_from_env(), 12);
  for (const char* bad : {"0", "-3", "two", "3x", "1.5"}) {
    setenv("DDP_EXPLAIN", bad, 1);
    try {
      explain_iteration_from_env();
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(has(e.what(), std::string("DDP_EXPLAIN='") + bad + "' is not valid")) << e.what();
    }
  }
  unsetenv("DDP_EXPLAIN");
}

// ---- the reducer: ranks asked for different iterations follow rank 0 (explain is collective) ----

namespace {

// Three synchronized steps of Branchy on two thread ranks, rank r asked to explain `asked[r]`; returns what
// the process printed on stdout (rank 0 prints the account).
std::string train_two_ranks_explaining(std::array<int64_t, 2> asked, int steps = 3) {
  ::testing::internal::CaptureStdout();
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) {
    nn::manual_seed(7);
    auto model = std::make_shared<models::Branchy>(models::BranchyConfig{6, 8, 3, DType::F64});
    DDPOptions o;
    o.find_unused_parameters = true;
    o.explain_iteration = asked[static_cast<size_t>(rank)];
    DistributedDataParallel ddp(
        model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg), o);
    for (int step = 0; step < steps; ++step) {
      Tensor x = Tensor::randn({2, 6}, 5 + step, DType::F64);
      Tensor loss = ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1}, {2}));
      autograd::backward(loss);
    }
  });
  return ::testing::internal::GetCapturedStdout();
}

}  // namespace

TEST(StepExplainReducer, RanksAskedForDifferentIterationsFollowRankZeroAndNothingHangs) {
  // Rank 0 asks for 2, rank 1 for nothing: iteration 2 is explained, once.
  std::string out = train_two_ranks_explaining({2, 0});
  EXPECT_NE(out.find("explain iteration 2: 2 ranks"), std::string::npos) << out;
  EXPECT_EQ(out.find("explain iteration", out.find("explain iteration") + 1), std::string::npos) << out;
  EXPECT_NE(out.find("never_used.weight never_used.bias\n"), std::string::npos) << out;
  // Rank 1 asks for 3, rank 0 for nothing: nobody explains.
  out = train_two_ranks_explaining({0, 3});
  EXPECT_EQ(out.find("explain"), std::string::npos) << out;
  // Both ask for 3: explained.
  out = train_two_ranks_explaining({3, 3});
  EXPECT_NE(out.find("explain iteration 3: 2 ranks"), std::string::npos) << out;
}
