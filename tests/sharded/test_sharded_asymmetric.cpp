// test_sharded_asymmetric.cpp - ZeRO-2 and ZeRO-3 (ShardedDataParallel + ShardedOptimizer) when the ranks do
// DIFFERENT things (issue 23, "tests that must exist"), float64, thread worlds of 2 and 3:
//   - a rank whose backward skips a parameter with find_unused_parameters off: it gets the reducer's
//     unused-parameter error at the end of backward, catches it, steps like the others, and training goes on;
//     the ranks stay bitwise equal and equal one process that applies the averaged gradients (that rank's
//     contribution to the skipped layer is zero), whether it happens in the first step (ZeRO-3 agrees its
//     unit order on that forward) or a later one;
//   - a rank that raises between forward and backward and catches it. The semantics (as plain DDP's): a rank
//     may not skip its backward alone - the others' backward waits in the reduce-scatters (and ZeRO-3's
//     backward gathers) this rank would issue. A raise between forward and backward must therefore become the
//     whole world's decision: either every rank raises it (a check on the same data), or the loop agrees on
//     it before any rank starts its backward (an all-reduce of an "ok" flag). Then every rank abandons the
//     iteration - no backward, no step - and the next forward settles it (the reducer has nothing in flight,
//     ZeRO-3 reshards every unit). The result equals a run without that step, ranks bitwise equal. And why:
//     a rank that skips its backward alone leaves the others a named error (the collective, the rank that did
//     not arrive) after the collective timeout - no hang, but no saving the iteration either.
// A rank killed during a ZeRO-3 parameter gather runs as real processes under ddprun at the end of this file
// (tests/progs/sharded_kill_worker.cpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include "runtime/autograd/engine.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/nn/layers.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "tests/support/ddp_test_util.h"
#include "tests/support/run_process.h"

using namespace ddp;
using namespace ddp::testing;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

constexpr int kFeatures = 6, kHidden = 8, kClasses = 3;
constexpr int64_t kRows = 3;

// items.0 -> (items.1, when use_middle) -> items.2 -> head. The modules are called through operator() so
// their forward hooks run (ZeRO-3 units, ZeRO-2's per-module waits); each item is a unit of ZeRO-3 by
// default, head is in the root unit (gathered for the whole forward and backward).
class Skippable : public nn::Module {
 public:
  Skippable() {
    items = register_module("items", std::make_shared<nn::ModuleList<nn::Linear>>());
    items->push_back(std::make_shared<nn::Linear>(kFeatures, kHidden, true, DType::F64));
    items->push_back(std::make_shared<nn::Linear>(kHidden, kHidden, true, DType::F64));
    items->push_back(std::make_shared<nn::Linear>(kHidden, kClasses, true, DType::F64));
    head = register_module("head", std::make_shared<nn::Linear>(kClasses, kClasses, true, DType::F64));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::relu((*items)[0](x));
    if (use_middle) h = ops::relu((*items)[1](h));
    return (*head)((*items)[2](h));
  }
  std::shared_ptr<nn::ModuleList<nn::Linear>> items;
  std::shared_ptr<nn::Linear> head;
  bool use_middle = true;
};

std::shared_ptr<Skippable> make_model() {
  nn::manual_seed(2024);
  return std::make_shared<Skippable>();
}

Batch batch_of(int step, int rank) {
  Batch b;
  b.x = Tensor::randn({kRows, kFeatures}, 500 + 37 * step + rank, DType::F64);
  std::vector<int64_t> y(kRows);
  for (int64_t i = 0; i < kRows; ++i) y[i] = (i + step + 2 * rank) % kClasses;
  b.y = Tensor::from_data(y, {kRows});
  return b;
}

std::unique_ptr<optim::Optimizer> make_sgd(std::vector<nn::NamedTensor> ps) {
  return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

// Short enough that a rank left waiting fails the test in seconds instead of minutes.
dist::ProcessGroupOptions short_timeout() {
  dist::ProcessGroupOptions o;
  o.timeout = 5s;
  o.debug_collectives = false;
  return o;
}

// One training step of one rank; writes what it caught (if anything) into `caught`.
using StepFn = std::function<void(int rank, int step, Skippable& model, ShardedDataParallel& sdp,
                                  ShardedOptimizer& opt, std::string& caught)>;

struct Outcome {
  std::vector<std::vector<std::vector<double>>> finals;  // per rank, after the run (gathered)
  std::vector<std::string> caught;                       // per rank, everything it caught
};

// A thread world of `world` ranks on `backend` (both groups), each with ZeRO-`stage` over the Skippable model
// and SGD with momentum (ZeRO-3: with a gather group, as it requires; `set` changes other options), running
// `steps` steps of `step_fn`.
Outcome run_sharded(const std::string& backend, int stage, int world, int steps, const StepFn& step_fn,
                    const std::function<void(ShardOptions&)>& set = {}) {
  Outcome out;
  out.finals.resize(world);
  out.caught.resize(world);
  dist::run_threads(
      world,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        auto model = make_model();
        ShardOptions o;
        o.stage = stage;
        if (set) set(o);
        if (stage == 3) {
          dist::DistEnv env;
          env.rank = rank;
          env.world_size = world;
          dist::ProcessGroupOptions po = short_timeout();
          po.name = "gather";
          o.gather_group = dist::new_process_group(env, store, backend, po);
        }
        ShardedDataParallel sdp(model, borrow(pg), o);
        ShardedOptimizer opt(sdp, make_sgd);
        for (int step = 0; step < steps; ++step) step_fn(rank, step, *model, sdp, opt, out.caught[rank]);
        auto whole = sdp.gathered_parameters();
        out.finals[rank] = snapshot_params(*model);
      },
      short_timeout(), backend);
  return out;
}

// One process: each step, the ranks' slices (loss / world) accumulated with `uses_middle(step, rank)`, then
// a plain SGD step; steps for which `abandoned(step)` holds are left out entirely.
std::vector<std::vector<double>> reference(int world, int steps,
                                           const std::function<bool(int, int)>& uses_middle,
                                           const std::function<bool(int)>& abandoned) {
  auto model = make_model();
  auto opt = make_sgd(model->named_parameters());
  for (int step = 0; step < steps; ++step) {
    if (abandoned(step)) continue;
    model->zero_grad();
    for (int r = 0; r < world; ++r) {
      model->use_middle = uses_middle(step, r);
      Batch b = batch_of(step, r);
      autograd::backward(ops::cross_entropy((*model)(b.x), b.y) * (1.0 / world));
    }
    opt->step();
  }
  return snapshot_params(*model);
}

void expect_ranks_equal_and_match(const Outcome& got, const std::vector<std::vector<double>>& ref) {
  for (size_t r = 1; r < got.finals.size(); ++r)
    EXPECT_TRUE(got.finals[r] == got.finals[0]) << "rank " << r << "'s parameters differ from rank 0's";
  EXPECT_LT(max_relative_difference(got.finals[0], ref), 1e-12);
  // The run must have moved the parameters (a run that never stepped would also be "equal").
  EXPECT_GT(max_relative_difference(ref, snapshot_params(*make_model())), 1e-3);
}

std::string where(const std::string& backend, int stage, int world) {
  return "zero" + std::to_string(stage) + " world " + std::to_string(world) + " " + backend;
}

}  // namespace

// A rank does not use items.1 in one step (find_unused_parameters off). Its backward ends with the reducer's
// unused-parameter error naming items.1's parameters; it catches it and steps with the averaged gradients
// (its own contribution to items.1 zero), as do the others; training goes on. Rank 0 in step 0 (the forward
// whose order ZeRO-3 agrees on: rank 0 observed only items.0 and items.2) and in step 1; the last rank in
// step 0. ZeRO-2 with one bucket and with one bucket per parameter; ZeRO-3 with prefetch 1, 0 (and parameters
// kept from forward to backward) and 2.
TEST(ShardedAsymmetric, RankWhoseBackwardSkipsAParameterCatchesTheErrorAndTrainingContinues) {
  constexpr int kSteps = 4;
  struct Variant {
    int stage;
    const char* name;
    std::function<void(ShardOptions&)> set;
  };
  const std::vector<Variant> variants = {
      {2, "one bucket", [](ShardOptions&) {}},
      {2, "a bucket per parameter",
       [](ShardOptions& o) { o.ddp.bucket_cap_mb = o.ddp.first_bucket_mb = 1e-9; }},
      {3, "prefetch 1", [](ShardOptions&) {}},
      {3, "prefetch 0, no reshard after forward",
       [](ShardOptions& o) {
         o.prefetch = 0;
         o.reshard_after_forward = false;
       }},
      {3, "prefetch 2", [](ShardOptions& o) { o.prefetch = 2; }},
  };
  struct Skip {
    std::string backend;
    int world, rank, step;
  };
  std::vector<std::pair<const Variant*, Skip>> cases;
  for (const Variant& v : variants) {
    for (int world : {2, 3})
      for (auto [rank, step] : {std::pair{0, 0}, std::pair{0, 1}, std::pair{world - 1, 0}})
        cases.push_back({&v, Skip{"shm", world, rank, step}});
    if (std::string(v.name) == "one bucket" || std::string(v.name) == "prefetch 1")
      cases.push_back({&v, Skip{"gloo", 3, 2, 1}});
  }
  for (const auto& [vp, c] : cases) {
    const Variant& v = *vp;
    const int world = c.world, skip_rank = c.rank, skip_step = c.step;
    SCOPED_TRACE(where(c.backend, v.stage, world) + " (" + v.name + "), rank " + std::to_string(skip_rank) +
                 " skips items.1 in step " + std::to_string(skip_step));
    auto uses_middle = [&](int step, int rank) { return !(rank == skip_rank && step == skip_step); };
    const Outcome got = run_sharded(
        c.backend, v.stage, world, kSteps,
        [&](int rank, int step, Skippable& model, ShardedDataParallel& sdp, ShardedOptimizer& opt,
            std::string& caught) {
          model.use_middle = uses_middle(step, rank);
          Batch b = batch_of(step, rank);
          try {
            autograd::backward(ops::cross_entropy(sdp.forward(b.x), b.y));
          } catch (const Error& e) {
            caught += "step " + std::to_string(step) + ": " + e.what() + "\n";
          }
          opt.step();
          opt.zero_grad();
        },
        v.set);
    const std::string& m = got.caught[skip_rank];
    EXPECT_NE(m.find("step " + std::to_string(skip_step) + ": rank " + std::to_string(skip_rank) +
                     ": DDP finished this backward but 2 parameter(s) received no gradient"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("items.1.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("items.1.bias"), std::string::npos) << m;
    EXPECT_EQ(m.find("items.0."), std::string::npos) << m;
    EXPECT_EQ(m.find("step " + std::to_string(1 - skip_step) + ":"), std::string::npos)
        << "an error in a step where every rank used every parameter: " << m;
    for (int r = 0; r < world; ++r) {
      if (r != skip_rank) {
        EXPECT_EQ(got.caught[r], "") << "rank " << r;
      }
    }
    expect_ranks_equal_and_match(got, reference(world, kSteps, uses_middle, [](int) { return false; }));
  }
}

namespace {
// ZeRO-3 also with prefetch 0 and the units kept gathered from forward to backward (what an abandoned
// iteration leaves gathered then: every unit).
std::vector<std::pair<std::string, std::function<void(ShardOptions&)>>> settings(int stage) {
  std::vector<std::pair<std::string, std::function<void(ShardOptions&)>>> out{{"", {}}};
  if (stage == 3)
    out.push_back({", prefetch 0, no reshard after forward", [](ShardOptions& o) {
                     o.prefetch = 0;
                     o.reshard_after_forward = false;
                   }});
  return out;
}

// The user's check between forward and backward (a loss that must be finite, a batch that must be valid...).
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace

// Every rank raises the same error between forward and backward in step 1 (a check on data all ranks see)
// and catches it: every rank abandons the iteration. The next forward settles it (ZeRO-3: the root unit, and
// without reshard_after_forward every unit, were still gathered); the run equals one without step 1.
TEST(ShardedAsymmetric, ErrorEveryRankRaisesBetweenForwardAndBackwardAbandonsTheIterationEverywhere) {
  constexpr int kSteps = 4, kBad = 1;
  for (const std::string backend : {"shm", "gloo"})
    for (int stage : {2, 3})
      for (int world : {2, 3})
        for (const auto& [setting, set] : settings(stage)) {
          SCOPED_TRACE(where(backend, stage, world) + setting);
          const Outcome got = run_sharded(
              backend, stage, world, kSteps,
              [&](int rank, int step, Skippable&, ShardedDataParallel& sdp, ShardedOptimizer& opt,
                  std::string& caught) {
                Batch b = batch_of(step, rank);
                try {
                  Tensor loss = ops::cross_entropy(sdp.forward(b.x), b.y);
                  if (step == kBad) throw UserError("step " + std::to_string(step) + " rejected by the loop");
                  autograd::backward(loss);
                  opt.step();
                  opt.zero_grad();
                } catch (const UserError& e) {
                  caught += std::string(e.what()) + "\n";
                }
              },
              set);
          for (int r = 0; r < world; ++r)
            EXPECT_EQ(got.caught[r], "step 1 rejected by the loop\n") << "rank " << r;
          expect_ranks_equal_and_match(
              got, reference(
                       world, kSteps, [](int, int) { return true; }, [&](int step) { return step == kBad; }));
        }
}

// Only the last rank raises between forward and backward (in step 1, and in step 2 on a ZeRO-3 forward that
// already agreed its order) and catches it. The loop agrees before any backward - an all-reduce of "this rank
// got through its forward" on the main group - so every rank abandons those iterations together; the others
// never wait in a collective the raising rank will not issue. The run equals one without those steps.
TEST(ShardedAsymmetric, OneRankRaisesBetweenForwardAndBackwardTheLoopAgreesAndEveryRankAbandons) {
  constexpr int kSteps = 5;
  auto bad = [](int step) { return step == 1 || step == 2; };
  for (const std::string backend : {"shm", "gloo"})
    for (int stage : {2, 3})
      for (int world : {2, 3})
        for (const auto& [setting, set] : settings(stage)) {
          SCOPED_TRACE(where(backend, stage, world) + setting);
          std::vector<std::string> abandoned(world);
          const Outcome got = run_sharded(
              backend, stage, world, kSteps,
              [&](int rank, int step, Skippable&, ShardedDataParallel& sdp, ShardedOptimizer& opt,
                  std::string& caught) {
                Batch b = batch_of(step, rank);
                Tensor loss;
                bool ok = true;
                try {
                  loss = ops::cross_entropy(sdp.forward(b.x), b.y);
                  if (rank == world - 1 && bad(step))
                    throw UserError("rank " + std::to_string(rank) + " rejected step " +
                                    std::to_string(step));
                } catch (const UserError& e) {
                  caught += std::string(e.what()) + "\n";
                  ok = false;
                }
                Tensor all_ok = Tensor::from_data<int32_t>({ok ? 1 : 0}, {1});
                host_allreduce(sdp.process_group(), all_ok, dist::ReduceOp::Min);
                if (all_ok.data<int32_t>()[0] == 0) {
                  abandoned[rank] += std::to_string(step) + " ";
                  return;  // every rank: no backward, no step
                }
                autograd::backward(loss);
                opt.step();
                opt.zero_grad();
              },
              set);
          for (int r = 0; r < world; ++r) {
            EXPECT_EQ(abandoned[r], "1 2 ") << "rank " << r;
            EXPECT_EQ(got.caught[r], r == world - 1
                                         ? "rank " + std::to_string(r) + " rejected step 1\nrank " +
                                               std::to_string(r) + " rejected step 2\n"
                                         : "")
                << "rank " << r;
          }
          expect_ranks_equal_and_match(got, reference(
                                                world, kSteps, [](int, int) { return true; }, bad));
        }
}

// Why the loop must agree: a rank that raises between forward and backward and skips its backward ALONE
// leaves the others waiting in their backward's first collective (ZeRO-2: a bucket's reduce-scatter; ZeRO-3:
// a unit's backward gather on the gather group). They fail there after the collective timeout (2 s here) with
// an error naming the collective and the rank that did not arrive - no hang - and the iteration cannot be
// saved: the ranks have parted (this test stops every rank there).
TEST(ShardedAsymmetric, RankThatSkipsItsBackwardAloneLeavesTheOthersANamedErrorNotAHang) {
  for (int stage : {2, 3}) {
    SCOPED_TRACE("zero" + std::to_string(stage));
    std::vector<std::string> errors(2);
    std::atomic<bool> reported{false};
    const auto t0 = std::chrono::steady_clock::now();
    dist::ProcessGroupOptions po = short_timeout();
    po.timeout = 2s;
    dist::run_threads(
        2,
        [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
          auto model = make_model();
          ShardOptions o;
          o.stage = stage;
          dist::DistEnv env;
          env.rank = rank;
          env.world_size = 2;
          dist::ProcessGroupOptions go = po;
          go.name = "gather";
          o.gather_group = dist::new_process_group(env, store, "shm", go);
          ShardedDataParallel sdp(model, borrow(pg), o);
          ShardedOptimizer opt(sdp, make_sgd);
          for (int step = 0; step < 2; ++step) {
            Batch b = batch_of(step, rank);
            try {
              Tensor loss = ops::cross_entropy(sdp.forward(b.x), b.y);
              if (rank == 1 && step == 1) throw UserError("rank 1 rejected step 1");
              autograd::backward(loss);
              opt.step();
              opt.zero_grad();
            } catch (const std::exception& e) {
              errors[rank] = e.what();
              break;
            }
          }
          // Rank 1 stays (its groups alive) until rank 0 has its error: rank 0 must fail on the timeout, not
          // on a peer that left.
          if (rank == 0) reported = true;
          while (!reported && std::chrono::steady_clock::now() - t0 < 30s) std::this_thread::sleep_for(10ms);
        },
        po, "shm");
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(took, 12) << errors[0];
    EXPECT_EQ(errors[1], "rank 1 rejected step 1");
    const std::string collective = stage == 2 ? "reduce_scatter" : "allgather";
    EXPECT_TRUE(
        std::regex_search(errors[0], std::regex("shm " + collective +
                                                R"( #\d+ .* failed on rank 0 of 2 )"
                                                R"(.*rank\(s\) 1 \(last reached: #\d+\) did not arrive)")))
        << errors[0];
  }
}

// ---- a rank killed during a ZeRO-3 parameter gather: real processes under ddprun ----

namespace {

struct KillRun {
  ProcessResult r;
  std::string all;  // stdout and stderr
  double wall_s = 0;
};

// ddprun --standalone with `world` workers of tests/progs/sharded_kill_worker.cpp; rank 1 SIGKILLs itself in
// items.0's forward pre-hook at step 2. Collective timeout 5 s (a backstop: both backends notice the death
// first), grace period 20 s: a survivor still running 20 s after ddprun's SIGTERM would show as SIGKILLed.
KillRun run_kill(int world, const std::string& backend, const std::string& when, bool ignore_term) {
  namespace fs = std::filesystem;
  const fs::path flight = fs::temp_directory_path() / ("ddp_sharded_kill_" + std::to_string(::getpid()));
  fs::remove_all(flight);
  fs::create_directories(flight);
  std::vector<std::string> argv{ddprun_path(),
                                "--standalone",
                                "--nproc-per-node",
                                std::to_string(world),
                                "--grace-period",
                                "20",
                                "--flight-dir",
                                flight.string(),
                                std::string(DDP_BIN_DIR) + "/testprog_sharded_kill_worker",
                                "--backend",
                                backend,
                                "--when",
                                when,
                                "--kill-rank",
                                "1",
                                "--kill-step",
                                "2"};
  if (ignore_term) argv.push_back("--ignore-term");
  ProcessOptions po;
  po.timeout_s = 60;
  po.unset_env = {"DDP_FLIGHT_RECORDER_DIR", "DDP_FLIGHT_RECORDER_ENTRIES"};
  po.set_env["DDP_COLLECTIVE_TIMEOUT_S"] = "5";
  KillRun k;
  const auto t0 = std::chrono::steady_clock::now();
  k.r = run_process(argv, po);
  k.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  k.all = k.r.out + k.r.err;
  fs::remove_all(flight);
  return k;
}

bool has(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern));
}

// What every run asserts: no timeout, ddprun's exit code and root cause, nobody got past step 1.
void expect_job_ended_by_the_kill(const KillRun& k, int world) {
  ASSERT_FALSE(k.r.timed_out) << k.all;
  EXPECT_EQ(k.r.exit_code, 128 + 9) << k.all;
  EXPECT_LT(k.wall_s, 15) << k.all;
  EXPECT_TRUE(has(k.all,
                  R"(ddprun: root cause: rank 1 \(local rank 1, pid \d+\) ended with SIGKILL \(signal 9\); )"
                  R"(ddprun exits with 137)"))
      << k.all;
  for (int r = 0; r < world; ++r) {
    EXPECT_NE(k.all.find("[rank " + std::to_string(r) + "] rank " + std::to_string(r) + " step 1 done"),
              std::string::npos)
        << k.all;
    EXPECT_EQ(k.all.find("rank " + std::to_string(r) + " step 2 done"), std::string::npos) << k.all;
  }
}

// Survivor r ended on its own with exit code 1 while ignoring ddprun's SIGTERM (not by the SIGKILL that
// follows the grace period), after printing the collective's error.
void expect_survivor_failed_on_its_own(const KillRun& k, int r, int world, const std::string& backend) {
  const std::string rs = std::to_string(r);
  EXPECT_TRUE(has(k.all, "\\[rank " + rs + "\\] sharded_kill_worker: rank " + rs + ": " + backend +
                             R"( allgather #\d+ \(\d+ x float32 on cpu\) failed on rank )" + rs + " of " +
                             std::to_string(world)))
      << "rank " << r << "\n"
      << k.all;
  EXPECT_TRUE(has(k.all, "\n  " + rs + R"(\s+)" + rs +
                             R"(\s+\d+\s+exit code 1 .*\(failed too, after ddprun's SIGTERM\))"))
      << "rank " << r << "\n"
      << k.all;
}

}  // namespace

// Rank 1 dies before it issues items.0's gather in step 2, which the others have issued and wait in. Every
// survivor fails within moments with the collective's error naming rank 1 as the one that did not arrive
// (gloo: its connection closed; shm: its pid died) - not after the timeout, and without ddprun's help (they
// ignore SIGTERM here, like ranks on another node whose launcher saw nothing); ddprun ends the job with 137.
TEST(ShardedKilledDuringGather, TheOthersFailWithTheCollectiveAndTheMissingRankNamed) {
  for (auto [world, backend] : {std::pair{2, std::string("gloo")}, std::pair{3, std::string("gloo")},
                                std::pair{3, std::string("shm")}}) {
    SCOPED_TRACE("world " + std::to_string(world) + " " + backend);
    const KillRun k = run_kill(world, backend, "before", /*ignore_term=*/true);
    expect_job_ended_by_the_kill(k, world);
    for (int r = 0; r < world; ++r) {
      if (r == 1) continue;
      expect_survivor_failed_on_its_own(k, r, world, backend);
      EXPECT_TRUE(
          has(k.all, "\\[rank " + std::to_string(r) + "\\] sharded_kill_worker: rank " + std::to_string(r) +
                         R"(: .*rank\(s\) 1 \(last reached: #\d+\) did not arrive at this collective)"))
          << "rank " << r << "\n"
          << k.all;
    }
  }
}

// Rank 1 dies after its pre-hook gathered items.0 and issued items.1's gather (the prefetch), which is then
// in flight on every rank: the survivors fail on a gather every rank had arrived at, saying a peer closed its
// connection (which rank, ddprun's summary says: gloo names only the peer's address).
TEST(ShardedKilledDuringGather, KilledWithAGatherInFlightTheOthersFailSayingAPeerClosedItsConnection) {
  const int world = 3;
  const KillRun k = run_kill(world, "gloo", "after", /*ignore_term=*/true);
  expect_job_ended_by_the_kill(k, world);
  for (int r : {0, 2}) {
    expect_survivor_failed_on_its_own(k, r, world, "gloo");
    EXPECT_TRUE(has(k.all, "\\[rank " + std::to_string(r) + "\\] sharded_kill_worker: rank " +
                               std::to_string(r) +
                               ": .*a peer closed its connection - a rank exited or was killed"))
        << "rank " << r << "\n"
        << k.all;
  }
}

// The same kill with workers that keep SIGTERM's default: ddprun ends the job at once (the survivors either
// failed on their own first or were stopped by its SIGTERM, long before the 20 s grace period).
TEST(ShardedKilledDuringGather, DdprunEndsTheJobAtOnce) {
  const int world = 2;
  const KillRun k = run_kill(world, "gloo", "before", /*ignore_term=*/false);
  expect_job_ended_by_the_kill(k, world);
  EXPECT_TRUE(has(
      k.all,
      R"re(\n  0\s+0\s+\d+\s+(SIGTERM \(signal 15\).*\(stopped by ddprun\)|exit code 1 .*\(failed too))re"))
      << k.all;
}
