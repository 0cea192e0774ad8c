// test_cuda_parity.cpp - every op of this group on CUDA float32 against the CPU float32 result, forward and
// gradients (the backward kernels: GEMMs with transpose flags, column sums, sum_to_shape, block copies).
// Skipped without a GPU. Tolerances: 1e-5 relative + 1e-5 absolute for pointwise ops and reductions,
// 1e-4 for GEMMs (cuBLAS and OpenBLAS sum in different orders).
#include <gtest/gtest.h>

#include <functional>

#include "runtime/autograd/engine.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;

namespace {
using MultiOp = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs f on CPU float32 copies and on CUDA copies of `inputs`, backpropagates the same random output
// gradient on both, and compares outputs and input gradients.
void expect_parity(const char* what, const MultiOp& f, const std::vector<Tensor>& inputs, double tol) {
  std::vector<Tensor> cpu_in, gpu_in;
  for (const Tensor& t : inputs) {
    Tensor c = t.to(DType::F32);
    Tensor g = c.to(Device::cuda(0));
    c.set_requires_grad(true);
    g.set_requires_grad(true);
    cpu_in.push_back(c);
    gpu_in.push_back(g);
  }
  Tensor yc = f(cpu_in), yg = f(gpu_in);
  ASSERT_TRUE(yg.device().is_cuda()) << what;
  EXPECT_TRUE(all_close(yg, yc, tol, tol)) << what << ": forward";
  Tensor seed = Tensor::randn(yc.shape(), 77, DType::F32);
  autograd::backward({yc}, {seed});
  autograd::backward({yg}, {seed.to(Device::cuda(0))});
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(cpu_in[i].grad().defined(), gpu_in[i].grad().defined()) << what << ": input " << i;
    if (cpu_in[i].grad().defined()) {
      EXPECT_TRUE(all_close(gpu_in[i].grad(), cpu_in[i].grad(), tol, tol))
          << what << ": gradient of input " << i;
    }
  }
}

Tensor rnd(const Shape& s, uint64_t seed) { return Tensor::randn(s, seed, DType::F32); }

#define SKIP_WITHOUT_GPU()               \
  do {                                   \
    if (cuda_device_count() == 0) {      \
      GTEST_SKIP() << "skipped: no GPU"; \
    }                                    \
  } while (0)
}  // namespace

TEST(CudaParity, MatmulAndLinear) {
  SKIP_WITHOUT_GPU();
  auto mm = [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); };
  expect_parity("matmul 2-D", mm, {rnd({33, 65}, 1), rnd({65, 17}, 2)}, 1e-4);
  expect_parity("matmul batched", mm, {rnd({3, 2, 9, 31}, 3), rnd({3, 2, 31, 5}, 4)}, 1e-4);
  expect_parity("matmul shared b", mm, {rnd({4, 7, 12}, 5), rnd({12, 6}, 6)}, 1e-4);
  auto lin = [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); };
  expect_parity("linear", lin, {rnd({64, 784}, 7), rnd({100, 784}, 8), rnd({100}, 9)}, 1e-4);
  expect_parity("linear 3-D", lin, {rnd({2, 5, 3}, 10), rnd({1, 3}, 11), rnd({1}, 12)}, 1e-4);
  auto lin_nb = [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1]); };
  expect_parity("linear no bias", lin_nb, {rnd({7, 13}, 13), rnd({9, 13}, 14)}, 1e-4);
}

TEST(CudaParity, Activations) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> acts = {
      {"relu", ops::relu},
      {"gelu", ops::gelu},
      {"tanh", ops::tanh},
      {"sigmoid", ops::sigmoid},
      {"exp", ops::exp}};
  for (const auto& [name, op] : acts)
    expect_parity(
        name, [op](const std::vector<Tensor>& in) { return op(in[0]); }, {rnd({1001}, 20)}, 1e-5);
  expect_parity(
      "log", [](const std::vector<Tensor>& in) { return ops::log(in[0]); },
      {Tensor::uniform({517}, 21, 0.1, 4.0, DType::F32)}, 1e-5);
}

TEST(CudaParity, Reductions) {
  SKIP_WITHOUT_GPU();
  for (const std::vector<int64_t>& dims :
       std::vector<std::vector<int64_t>>{{0}, {1}, {-1}, {0, 2}, {1, 2}, {}, {0, 1, 2}}) {
    for (bool keepdim : {false, true}) {
      expect_parity(
          "sum", [dims, keepdim](const std::vector<Tensor>& in) { return ops::sum(in[0], dims, keepdim); },
          {rnd({5, 33, 7}, 30)}, 1e-5);
      expect_parity(
          "mean", [dims, keepdim](const std::vector<Tensor>& in) { return ops::mean(in[0], dims, keepdim); },
          {rnd({5, 33, 7}, 31)}, 1e-5);
    }
  }
  // a long sum of everything (two-pass kernel) and long rows
  expect_parity(
      "sum all", [](const std::vector<Tensor>& in) { return ops::sum(in[0]); }, {rnd({300000}, 32)}, 1e-4);
  expect_parity(
      "row sums", [](const std::vector<Tensor>& in) { return ops::sum(in[0], {1}); }, {rnd({3, 100000}, 33)},
      1e-4);
  // column sums cut into row chunks (kernels/cuda/column_sum_plan.h): a GPT-2 bias gradient's shape, a prime
  // row count, and (outer > 1) chunks of several slices
  for (const Shape& shape : std::vector<Shape>{{8192, 768}, {4099, 97}, {3, 4099, 33}})
    expect_parity(
        "column sums", [](const std::vector<Tensor>& in) { return ops::sum(in[0], {in[0].dim() - 2}); },
        {rnd(shape, 34)}, 1e-4);
}

TEST(CudaParity, ElementwiseBroadcasting) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<Shape, Shape>> shapes = {{{4, 5}, {4, 5}}, {{4, 5}, {5}},
                                                       {{4, 1}, {1, 5}}, {{2, 3, 4}, {3, 1}},
                                                       {{1}, {2, 3}},    {{6, 1, 7}, {1, 5, 1}}};
  for (const auto& [sa, sb] : shapes) {
    expect_parity(
        "add", [](const std::vector<Tensor>& in) { return in[0] + in[1]; }, {rnd(sa, 40), rnd(sb, 41)}, 1e-5);
    expect_parity(
        "sub", [](const std::vector<Tensor>& in) { return in[0] - in[1]; }, {rnd(sa, 42), rnd(sb, 43)}, 1e-5);
    expect_parity(
        "mul", [](const std::vector<Tensor>& in) { return in[0] * in[1]; }, {rnd(sa, 44), rnd(sb, 45)}, 1e-5);
    expect_parity(
        "div", [](const std::vector<Tensor>& in) { return in[0] / in[1]; },
        {rnd(sa, 46), Tensor::uniform(sb, 47, 0.5, 2.0, DType::F32)}, 1e-5);
  }
  expect_parity(
      "scalar ops", [](const std::vector<Tensor>& in) { return (in[0] * 3.0 + 1.5) / 2.0 - in[0]; },
      {rnd({9, 4}, 48)}, 1e-5);
}

TEST(CudaParity, ShapeOps) {
  SKIP_WITHOUT_GPU();
  expect_parity(
      "transpose", [](const std::vector<Tensor>& in) { return ops::transpose(in[0], 1, 2); },
      {rnd({2, 33, 35}, 50)}, 0);
  expect_parity(
      "permute",
      [](const std::vector<Tensor>& in) {
        return ops::permute(in[0], {2, 0, 3, 1});
      },
      {rnd({2, 3, 4, 5}, 51)}, 0);
  expect_parity(
      "concat",
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1]}, 1);
      },
      {rnd({3, 2, 4}, 52), rnd({3, 5, 4}, 53)}, 0);
  expect_parity(
      "split (one unused)",
      [](const std::vector<Tensor>& in) {
        auto p = ops::split(in[0], {2, 3, 1}, 2);
        return ops::concat({p[2], p[0]}, 2);
      },
      {rnd({4, 3, 6}, 54)}, 0);
  expect_parity(
      "slice", [](const std::vector<Tensor>& in) { return ops::slice(in[0], 1, 1, -1); },
      {rnd({4, 6, 3}, 55)}, 0);
  expect_parity(
      "reshape", [](const std::vector<Tensor>& in) { return ops::flatten(in[0], 1); }, {rnd({4, 6, 3}, 56)},
      0);
}
