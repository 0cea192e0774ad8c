// test_cuda_parity.cpp - the CUDA conv2d (cuDNN), pooling and batch_norm2d kernels against the CPU ones:
// forward values, input/parameter gradients and running stats. Skipped on machines without a GPU.
// Bounds: |gpu - cpu| <= tol * (1 + |cpu|) with tol = 1e-2 for float32 conv2d (cuDNN may use TF32 tensor
// cores, 10-bit mantissa, like PyTorch's default), 1e-5 for float32 pooling/batchnorm, 1e-10 for float64.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/autograd/engine.h"
#include "runtime/core/device.h"
#include "runtime/ops/batchnorm.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/pool.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;

namespace {

#define DDP_SKIP_WITHOUT_GPU()           \
  do {                                   \
    if (cuda_device_count() == 0) {      \
      GTEST_SKIP() << "skipped: no GPU"; \
    }                                    \
  } while (0)

// A leaf on `device` holding the values of `cpu_values` (converted to dtype), requiring grad.
Tensor leaf(const Tensor& cpu_values, DType dtype, Device device) {
  return cpu_values.to(dtype).to(device).set_requires_grad(true);
}

// The CPU result and gradients vs the GPU ones, elementwise within tol * (1 + |cpu|).
::testing::AssertionResult close_to_cpu(const Tensor& gpu, const Tensor& cpu, double tol) {
  if (!gpu.defined() || !cpu.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (!gpu.device().is_cuda()) return ::testing::AssertionFailure() << "result is not on the GPU";
  return all_close(gpu.to(Device::cpu()), cpu, tol, tol);
}

}  // namespace

TEST(CudaParity, Conv2d) {
  DDP_SKIP_WITHOUT_GPU();
  struct Case {
    Shape x, w;
    int64_t stride, padding;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 3, 5, 7}, {4, 3, 3, 3}, 1, 0, true},  {{2, 3, 5, 7}, {4, 3, 3, 3}, 2, 1, true},
      {{2, 3, 5, 7}, {4, 3, 3, 3}, 1, 1, false}, {{3, 8, 9, 9}, {16, 8, 1, 1}, 1, 0, true},
      {{1, 2, 6, 5}, {2, 2, 2, 3}, 2, 1, true},  {{4, 16, 12, 12}, {8, 16, 3, 3}, 1, 1, true}};
  uint64_t seed = 1;
  for (DType dtype : {DType::F32, DType::F64}) {
    const double tol = dtype == DType::F32 ? 1e-2 : 1e-10;
    for (const Case& c : cases) {
      SCOPED_TRACE("x " + shape_str(c.x) + " w " + shape_str(c.w) + " " + std::string(dtype_name(dtype)));
      Tensor xv = Tensor::randn(c.x, seed++, DType::F64), wv = Tensor::randn(c.w, seed++, DType::F64);
      Tensor bv = Tensor::randn({c.w[0]}, seed++, DType::F64);
      Tensor xc = leaf(xv, dtype, Device::cpu()), wc = leaf(wv, dtype, Device::cpu());
      Tensor xg = leaf(xv, dtype, Device::cuda(0)), wg = leaf(wv, dtype, Device::cuda(0));
      Tensor bc = c.bias ? leaf(bv, dtype, Device::cpu()) : Tensor();
      Tensor bg = c.bias ? leaf(bv, dtype, Device::cuda(0)) : Tensor();
      Tensor yc = ops::conv2d(xc, wc, bc, c.stride, c.padding);
      Tensor yg = ops::conv2d(xg, wg, bg, c.stride, c.padding);
      EXPECT_TRUE(close_to_cpu(yg, yc, tol));
      Tensor dy = Tensor::randn(yc.shape(), seed++, DType::F64).to(dtype);
      autograd::backward({yc}, {dy});
      autograd::backward({yg}, {dy.to(Device::cuda(0))});
      EXPECT_TRUE(close_to_cpu(xg.grad(), xc.grad(), tol));
      EXPECT_TRUE(close_to_cpu(wg.grad(), wc.grad(), tol));
      if (c.bias) {
        EXPECT_TRUE(close_to_cpu(bg.grad(), bc.grad(), tol));
      }
    }
  }
}

TEST(CudaParity, Pooling) {
  DDP_SKIP_WITHOUT_GPU();
  struct Case {
    Shape x;
    int64_t kernel, stride, padding;
  };
  const std::vector<Case> cases = {
      {{2, 3, 5, 7}, 3, 1, 0}, {{2, 3, 5, 7}, 3, 2, 1}, {{1, 2, 8, 8}, 2, 0, 0}, {{2, 4, 9, 6}, 3, 2, 1}};
  uint64_t seed = 100;
  for (DType dtype : {DType::F32, DType::F64}) {
    const double tol = dtype == DType::F32 ? 1e-5 : 1e-10;
    for (const Case& c : cases) {
      for (bool use_max : {true, false}) {
        SCOPED_TRACE("x " + shape_str(c.x) + (use_max ? " max " : " avg ") + std::string(dtype_name(dtype)));
        auto pool = [&](const Tensor& x) {
          return use_max ? ops::max_pool2d(x, c.kernel, c.stride, c.padding)
                         : ops::avg_pool2d(x, c.kernel, c.stride, c.padding);
        };
        // integer values: many ties, so the GPU must apply the CPU's first-maximum rule
        Tensor xv = Tensor::uniform(c.x, seed++, -3.0, 3.0, DType::F64);
        std::vector<double> v = xv.to_double_vector();
        for (double& e : v) e = static_cast<double>(static_cast<int>(e));
        xv = Tensor::from_vector(v, c.x, DType::F64);
        Tensor xc = leaf(xv, dtype, Device::cpu()), xg = leaf(xv, dtype, Device::cuda(0));
        Tensor yc = pool(xc), yg = pool(xg);
        EXPECT_TRUE(close_to_cpu(yg, yc, tol));
        Tensor dy = Tensor::randn(yc.shape(), seed++, DType::F64).to(dtype);
        autograd::backward({yc}, {dy});
        autograd::backward({yg}, {dy.to(Device::cuda(0))});
        EXPECT_TRUE(close_to_cpu(xg.grad(), xc.grad(), tol));
      }
    }
  }
}

TEST(CudaParity, BatchNorm2d) {
  DDP_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes = {{2, 3, 5, 7}, {4, 1, 1, 1}, {8, 16, 6, 6}, {1, 2, 3, 1}};
  uint64_t seed = 200;
  for (DType dtype : {DType::F32, DType::F64}) {
    const double tol = dtype == DType::F32 ? 1e-5 : 1e-10;
    for (const Shape& s : shapes) {
      for (bool training : {true, false}) {
        SCOPED_TRACE("x " + shape_str(s) + (training ? " training " : " eval ") +
                     std::string(dtype_name(dtype)));
        const int64_t c = s[1];
        Tensor xv = Tensor::randn(s, seed++, DType::F64, 3.0);
        Tensor wv = Tensor::randn({c}, seed++, DType::F64), bv = Tensor::randn({c}, seed++, DType::F64);
        Tensor rmv = Tensor::randn({c}, seed++, DType::F64),
               rvv = Tensor::uniform({c}, seed++, 0.5, 2, DType::F64);
        Tensor xc = leaf(xv, dtype, Device::cpu()), wc = leaf(wv, dtype, Device::cpu()),
               bc = leaf(bv, dtype, Device::cpu());
        Tensor xg = leaf(xv, dtype, Device::cuda(0)), wg = leaf(wv, dtype, Device::cuda(0)),
               bg = leaf(bv, dtype, Device::cuda(0));
        Tensor rmc = rmv.to(dtype), rvc = rvv.to(dtype);
        Tensor rmg = rmc.to(Device::cuda(0)), rvg = rvc.to(Device::cuda(0));
        Tensor yc = ops::batch_norm2d(xc, wc, bc, rmc, rvc, training, 0.2);
        Tensor yg = ops::batch_norm2d(xg, wg, bg, rmg, rvg, training, 0.2);
        EXPECT_TRUE(close_to_cpu(yg, yc, tol));
        EXPECT_TRUE(close_to_cpu(rmg, rmc, tol));
        EXPECT_TRUE(close_to_cpu(rvg, rvc, tol));
        Tensor dy = Tensor::randn(s, seed++, DType::F64).to(dtype);
        autograd::backward({yc}, {dy});
        autograd::backward({yg}, {dy.to(Device::cuda(0))});
        EXPECT_TRUE(close_to_cpu(xg.grad(), xc.grad(), tol));
        EXPECT_TRUE(close_to_cpu(wg.grad(), wc.grad(), tol));
        EXPECT_TRUE(close_to_cpu(bg.grad(), bc.grad(), tol));
      }
    }
  }
}
