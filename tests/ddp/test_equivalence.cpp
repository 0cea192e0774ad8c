// test_equivalence.cpp - N ranks with per-rank batch b train exactly like one process with batch N*b
// (float64, relative 1e-10 after 5 SGD-with-momentum steps), for MLP, CNN (BatchNorm) and a GPT-like model,
// world sizes 1-4, bucket caps tiny / default / huge, with and without gradient_as_bucket_view, over each CPU
// process group (gloo, shm, hier), and "shm-inplace": shm with every bucket in a registered shared-memory
// buffer and all-reduced in place (DDP_SHM_DIRECT_MIN_BYTES=0; these models' buckets are small), the division
// by the world size folded into the all-reduce.
#include <gtest/gtest.h>

#include "models/cnn.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
enum class Cap { Tiny, Default, Huge };
DDPOptions options_for(Cap cap, bool view) {
  DDPOptions o;
  o.gradient_as_bucket_view = view;
  if (cap == Cap::Tiny) o.bucket_cap_mb = o.first_bucket_mb = 1e-9;  // every parameter its own bucket
  if (cap == Cap::Huge) o.bucket_cap_mb = o.first_bucket_mb = 1e6;   // one bucket
  return o;
}

ModelFactory mlp_factory() {
  return [] { return std::make_shared<models::MLP>(models::MLPConfig{12, {16, 16}, 5, DType::F64}); };
}
BatchFn mlp_data() {
  return [](int step, int64_t rows) {
    Batch b;
    b.x = Tensor::randn({rows, 12}, 100 + step, DType::F64);
    std::vector<int64_t> y(rows);
    for (int64_t i = 0; i < rows; ++i) y[i] = (i * 7 + step) % 5;
    b.y = Tensor::from_data(y, {rows});
    return b;
  };
}

ModelFactory cnn_factory() {
  return [] { return std::make_shared<models::CNN>(models::CNNConfig{1, 3, 4, 8, 3, DType::F64}); };
}
BatchFn cnn_data() {
  return [](int step, int64_t rows) {
    Batch b;
    b.x = Tensor::randn({rows, 1, 8, 8}, 200 + step, DType::F64);
    std::vector<int64_t> y(rows);
    for (int64_t i = 0; i < rows; ++i) y[i] = (i * 5 + step) % 3;
    b.y = Tensor::from_data(y, {rows});
    return b;
  };
}

ModelFactory gpt_factory() {
  return [] {
    models::GPTConfig c;
    c.vocab = 11;
    c.context = 6;
    c.d_model = 8;
    c.n_head = 2;
    c.n_layer = 2;
    c.dtype = DType::F64;
    return std::make_shared<models::GPT>(c);
  };
}
BatchFn gpt_data() {
  return [](int step, int64_t rows) {
    std::vector<int64_t> x(rows * 6), y(rows * 6);
    for (int64_t i = 0; i < rows * 6; ++i) {
      x[i] = (i * 3 + step * 5 + i / 7) % 11;
      y[i] = (x[i] * 2 + 1) % 11;
    }
    return Batch{Tensor::from_data(x, {rows, 6}), Tensor::from_data(y, {rows, 6})};
  };
}

void check_equivalence(const ModelFactory& make, const BatchFn& data, bool per_slice, const std::string& backend,
                       int world, Cap cap, bool view) {
  RunConfig run;
  run.backend = backend == "shm-inplace" ? "shm" : backend;
  if (backend == "shm-inplace") setenv("DDP_SHM_DIRECT_MIN_BYTES", "0", 1);
  run.world = world;
  run.per_rank = 2;
  run.ddp = options_for(cap, view);
  auto ranks = train_ddp(make, data, run);
  unsetenv("DDP_SHM_DIRECT_MIN_BYTES");
  auto ref = train_reference(make, data, run, per_slice);
  for (int r = 0; r < world; ++r)
    EXPECT_LT(max_relative_difference(ranks[r], ref), 1e-10)
        << backend << " rank " << r << " world " << world << " cap " << static_cast<int>(cap) << " view " << view;
}
}  // namespace

class Equivalence : public ::testing::TestWithParam<std::tuple<std::string, int, Cap, bool>> {};

TEST_P(Equivalence, MLP) {
  auto [backend, world, cap, view] = GetParam();
  check_equivalence(mlp_factory(), mlp_data(), false, backend, world, cap, view);
}
TEST_P(Equivalence, CNNWithBatchNorm) {
  auto [backend, world, cap, view] = GetParam();
  check_equivalence(cnn_factory(), cnn_data(), true, backend, world, cap, view);
}
TEST_P(Equivalence, GPT) {
  auto [backend, world, cap, view] = GetParam();
  check_equivalence(gpt_factory(), gpt_data(), false, backend, world, cap, view);
}

INSTANTIATE_TEST_SUITE_P(WorldCapView, Equivalence,
                         ::testing::Combine(::testing::Values(std::string("gloo"), std::string("shm"),
                                                              std::string("hier"),
                                                              std::string("shm-inplace")),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Cap::Tiny, Cap::Default, Cap::Huge),
                                            ::testing::Bool()));

TEST(Equivalence, NoSyncAccumulationOfFourMicroSteps) {
  for (int world : {2, 3}) {
    RunConfig run;
    run.world = world;
    run.per_rank = 2;
    run.accumulation = 4;
    auto ranks = train_ddp(mlp_factory(), mlp_data(), run);
    auto ref = train_reference(mlp_factory(), mlp_data(), run, false);
    for (int r = 0; r < world; ++r) EXPECT_LT(max_relative_difference(ranks[r], ref), 1e-10) << "rank " << r;
  }
}
