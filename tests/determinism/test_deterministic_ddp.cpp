// test_deterministic_ddp.cpp - the deterministic mode as a DDPOptions field (deterministic_micro_batches): a
// plain C++ loop - forward and backward per micro-batch, finish_step(), the optimizer - gives after 6 steps the
// bits of one process running every micro-batch, at worlds 2-4 on shm, gloo and hier, with micro-batches dealt
// round-robin (world 3: 2, 1, 1) or all to one rank; a forgotten zero_grad and finish_step() without the mode are
// named errors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "runtime/autograd/engine.h"
#include "runtime/core/error.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/nn/layers.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"

using namespace ddp;

namespace {

constexpr int kMicroBatches = 4, kRows = 5, kSteps = 6;

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

std::shared_ptr<nn::Module> make_model() {
  nn::manual_seed(7);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(12, 16));
  m->push_back(std::make_shared<nn::Tanh>());
  m->push_back(std::make_shared<nn::Linear>(16, 3));
  return m;
}

// Micro-batch j of step t: kRows rows of 12 features and their classes.
std::pair<Tensor, Tensor> micro_batch(int t, int j) {
  std::mt19937_64 rng(100 * static_cast<uint64_t>(t) + j);
  std::normal_distribution<float> nd;
  std::vector<float> x(kRows * 12);
  std::vector<int64_t> y(kRows);
  for (auto& v : x) v = nd(rng);
  for (auto& c : y) c = static_cast<int64_t>(rng() % 3);
  return {Tensor::from_data<float>(x, {kRows, 12}), Tensor::from_data<int64_t>(y, {kRows})};
}

// `mine(rank, world, j)`: whether this rank runs micro-batch j. Returns the final parameters' bytes.
std::vector<std::vector<float>> train(dist::ProcessGroup& pg, const std::function<bool(int, int, int)>& mine) {
  auto model = make_model();
  DDPOptions o;
  o.deterministic_micro_batches = kMicroBatches;
  DistributedDataParallel ddp(model, borrow(pg), o);
  optim::AdamW opt(model->named_parameters(), optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.01});
  for (int t = 0; t < kSteps; ++t) {
    for (int j = 0; j < kMicroBatches; ++j) {
      if (!mine(pg.rank(), pg.size(), j)) continue;
      auto [x, y] = micro_batch(t, j);
      autograd::backward(ops::cross_entropy(ddp.forward(x), y));
    }
    EXPECT_EQ(ddp.finish_step(), kMicroBatches);
    opt.step();
    opt.zero_grad();
  }
  std::vector<std::vector<float>> out;
  for (auto& p : model->parameters()) {
    const float* d = p.data<float>();
    out.emplace_back(d, d + p.numel());
  }
  return out;
}

}  // namespace

TEST(DeterministicDdp, APlainLoopGivesTheBitsOfOneProcessAtEveryWorldAndDeal) {
  std::vector<std::vector<float>> reference;
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) { reference = train(pg, [](int, int, int) { return true; }); });
  const std::vector<std::function<bool(int, int, int)>> deals = {
      [](int r, int w, int j) { return j % w == r; },     // round robin
      [](int r, int w, int) { return r == w - 1; },        // all on the last rank, the others none
  };
  for (const char* backend : {"shm", "gloo", "hier"})
    for (int world = 2; world <= 4; ++world)
      for (size_t d = 0; d < deals.size(); ++d) {
        SCOPED_TRACE(std::string(backend) + " world " + std::to_string(world) + " deal " + std::to_string(d));
        std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(world));
        dist::run_threads(
            world, [&](int rank, dist::ProcessGroup& pg) { got[size_t(rank)] = train(pg, deals[d]); },
            dist::ProcessGroupOptions{}, backend);
        for (int r = 0; r < world; ++r)
          for (size_t p = 0; p < reference.size(); ++p)
            ASSERT_EQ(0, std::memcmp(got[size_t(r)][p].data(), reference[p].data(), reference[p].size() * 4))
                << "rank " << r << " parameter " << p;
      }
}

TEST(DeterministicDdp, AForgottenZeroGradAndFinishStepWithoutTheModeAreNamed) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    auto model = make_model();
    DDPOptions o;
    o.deterministic_micro_batches = 2;
    DistributedDataParallel ddp(model, borrow(pg), o);
    auto [x, y] = micro_batch(0, 0);
    autograd::backward(ops::cross_entropy(ddp.forward(x), y));
    ddp.finish_step();  // no zero_grad after it
    try {
      (void)ddp.forward(x);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("zero_grad"), std::string::npos) << e.what();
    }
    DistributedDataParallel plain(make_model(), borrow(pg), DDPOptions{});
    try {
      plain.finish_step();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("deterministic_micro_batches"), std::string::npos) << e.what();
    }
  });
}
