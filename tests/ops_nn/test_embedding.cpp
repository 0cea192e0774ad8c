// test_embedding.cpp - embedding gather and scatter-add backward (repeated indices sum), bad
// indices, gradcheck, CUDA parity.
#include <gtest/gtest.h>

#include "runtime/ops/embedding.h"
#include "runtime/tensor/device_checks.h"
#include "tests/ops_nn/ops_nn_test_util.h"

using namespace ddp;
using namespace ddp::testing;

TEST(Embedding, GathersRows) {
  Tensor w = random_f64({5, 3}, 1, false);
  Tensor idx = Tensor::from_data<int64_t>({4, 0, 4, 2, 1, 1}, {2, 3});
  Tensor y = ops::embedding(w, idx);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  std::vector<double> wv = values(w), yv = values(y);
  const int64_t ids[] = {4, 0, 4, 2, 1, 1};
  for (int i = 0; i < 6; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(yv[i * 3 + c], wv[ids[i] * 3 + c]);
}

TEST(Embedding, BackwardScatterAddsRepeatedIndices) {
  Tensor w = random_f64({4, 2}, 1);
  Tensor idx = Tensor::from_data<int64_t>({3, 1, 3, 3}, {4});
  Tensor g = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, DType::F64);
  autograd::backward({ops::embedding(w, idx)}, {g});
  // row 0 and 2 unused; row 1 gets (3, 4); row 3 gets (1+5+7, 2+6+8).
  EXPECT_TRUE(all_close(w.grad(), {0, 0, 3, 4, 0, 0, 13, 16}, 0));
}

TEST(Embedding, Gradcheck) {
  Tensor idx = Tensor::from_data<int64_t>({0, 6, 2, 2, 6, 1, 0}, {7});
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return ops::embedding(in[0], idx); },
                        {random_f64({7, 5}, 2)}));
  Tensor idx2 = Tensor::from_data<int64_t>({0, 0}, {1, 2});
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return ops::embedding(in[0], idx2); },
                        {random_f64({1, 1}, 3)}));
}

TEST(Embedding, BadIndexNamesValueAndPosition) {
  Tensor w = random_f64({10, 4}, 1, false);
  try {
    ops::embedding(w, Tensor::from_data<int64_t>({1, 2, 3, 10, 4}, {5}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 10 at position 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::embedding(w, Tensor::from_data<int64_t>({-1}, {1})), Error);
  EXPECT_THROW(ops::embedding(w, Tensor::zeros({3}, DType::F32)), Error);
  EXPECT_THROW(ops::embedding(random_f64({10}, 1, false), Tensor::from_data<int64_t>({1}, {1})), Error);
}

TEST(Embedding, CudaMatchesCpu) {
  DDP_SKIP_WITHOUT_GPU();
  std::vector<int64_t> ids(4 * 64);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37) % 50);
  // float32: exact forward; backward sums in a different order (atomics): bound 1e-5 relative.
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return ops::embedding(in[0], in[1]); },
                          {random_f64({50, 96}, 1), Tensor::from_data(ids, {4, 64})}, 1e-6, 1e-5);
  try {  // a GPU reports a bad index at the next check, not in the op (runtime/tensor/device_checks.h)
    ops::embedding(Tensor::zeros({50, 8}, DType::F32, Device::cuda(0)),
                   Tensor::from_data<int64_t>({3, 60}, {2}).to(Device::cuda(0)));
    check_device_errors();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 60 at position 1"), std::string::npos) << e.what();
  }
}

// A bad index on a GPU: the op does not wait; its output row is zeros, its gradient goes to no row (nothing
// is read or written through it: compute-sanitizer memcheck runs Embedding.Cuda*), and the check raises it.
TEST(Embedding, CudaBadIndexGathersZerosScattersNothingAndIsRaisedAtTheCheck) {
  DDP_SKIP_WITHOUT_GPU();
  const std::vector<int64_t> ids = {3, 60, -2, 3, 49, int64_t(1) << 40};
  Tensor w_host = random_f64({50, 8}, 3, false).to(DType::F32);
  Tensor w = w_host.to(Device::cuda(0)).clone().detach();
  w.set_requires_grad(true);
  w.set_name("wte.weight");
  Tensor y = ops::embedding(w, Tensor::from_data(ids, {6}).to(Device::cuda(0)));
  Tensor g_host = random_f64({6, 8}, 4, false).to(DType::F32);
  autograd::backward({y}, {g_host.to(Device::cuda(0))});
  const std::vector<double> yv = values(y), wv = values(w_host), gv = values(g_host), dw = values(w.grad());
  std::vector<double> expected_dw(50 * 8, 0.0);
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t c = 0; c < 8; ++c) {
      const bool ok = ids[i] >= 0 && ids[i] < 50;
      EXPECT_EQ(yv[i * 8 + c], ok ? wv[static_cast<size_t>(ids[i]) * 8 + c] : 0.0) << i << "," << c;
      if (ok) expected_dw[static_cast<size_t>(ids[i]) * 8 + c] += gv[i * 8 + c];  // float32 sums in order
    }
  for (size_t k = 0; k < dw.size(); ++k) EXPECT_NEAR(dw[k], expected_dw[k], 1e-6) << k;
  try {
    check_device_errors();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 60 at position 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'wte.weight'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pending_device_checks(), 0);
}
