// ops_nn_test_util.h - helpers shared by the tests of the neural-network ops: GPU skipping, the CUDA-vs-CPU
// parity check (outputs and input gradients), and float32-vs-float64 comparison.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "runtime/autograd/engine.h"
#include "runtime/core/device.h"
#include "runtime/ops/elementwise.h"
#include "runtime/tensor/tensor.h"
#include "tests/support/gradcheck.h"

#define DDP_SKIP_WITHOUT_GPU() \
  if (::ddp::cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU"

namespace ddp::testing {

using NnOp = std::function<Tensor(const std::vector<Tensor>&)>;

// Fresh leaf copies of inputs on `device` and converted to `dtype` (integer inputs keep their dtype),
// requiring grad where the source does.
inline std::vector<Tensor> leaves_on(const std::vector<Tensor>& inputs, Device device, DType dtype) {
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    Tensor c = (dtype_is_floating(t.dtype()) ? t.to(dtype) : t).to(device).clone().detach();
    if (t.requires_grad()) c.set_requires_grad(true);
    out.push_back(c);
  }
  return out;
}

// Runs op on `inputs` (float32 after conversion) on the CPU and on CUDA with the same upstream gradient and
// checks that outputs and every input gradient agree within atol + rtol * |cpu|.
inline void expect_cuda_matches_cpu(const NnOp& op, const std::vector<Tensor>& inputs, double atol,
                                    double rtol) {
  std::vector<Tensor> cpu_in = leaves_on(inputs, Device::cpu(), DType::F32);
  std::vector<Tensor> gpu_in = leaves_on(inputs, Device::cuda(0), DType::F32);
  Tensor y_cpu = op(cpu_in);
  Tensor y_gpu = op(gpu_in);
  ASSERT_EQ(y_gpu.device(), Device::cuda(0));
  EXPECT_TRUE(all_close(y_gpu.to(Device::cpu()), y_cpu, atol, rtol)) << "forward output";
  Tensor upstream = Tensor::randn(y_cpu.shape(), 777, DType::F32);
  autograd::backward({y_cpu}, {upstream});
  autograd::backward({y_gpu}, {upstream.to(Device::cuda(0))});
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    ASSERT_TRUE(cpu_in[i].grad().defined() && gpu_in[i].grad().defined())
        << "input " << i << " has no gradient";
    EXPECT_TRUE(all_close(gpu_in[i].grad().to(Device::cpu()), cpu_in[i].grad(), atol, rtol))
        << "gradient of input " << i;
  }
}

// For ops whose float32 results sum long runs in an order of their own (layer norm's weight and bias
// gradients sum over every row): the CUDA float32 output and input gradients are no further from the float64
// result than twice the CPU float32 ones are, plus `atol`. A fixed bound between the two float32 results
// fails on a long row count where both are right (the first GPU run, 2026-12-04: 8192 rows, 3.2e-5 apart,
// each order's rounding). The float64 run shares the inputs and the upstream gradient.
inline double max_abs_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.to(Device::cpu()).to(DType::F64).to_double_vector();
  const auto y = b.to(Device::cpu()).to(DType::F64).to_double_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}
inline void expect_cuda_as_accurate_as_cpu(const NnOp& op, const std::vector<Tensor>& inputs, double atol) {
  std::vector<Tensor> in64 = leaves_on(inputs, Device::cpu(), DType::F64);
  std::vector<Tensor> cpu_in = leaves_on(inputs, Device::cpu(), DType::F32);
  std::vector<Tensor> gpu_in = leaves_on(inputs, Device::cuda(0), DType::F32);
  Tensor y64 = op(in64), y_cpu = op(cpu_in), y_gpu = op(gpu_in);
  ASSERT_EQ(y_gpu.device(), Device::cuda(0));
  const double cpu_out = max_abs_difference(y_cpu, y64), gpu_out = max_abs_difference(y_gpu, y64);
  EXPECT_LE(gpu_out, 2 * cpu_out + atol)
      << "forward output: CUDA float32 " << gpu_out << " from float64, CPU " << cpu_out;
  Tensor upstream = Tensor::randn(y_cpu.shape(), 777, DType::F32);
  autograd::backward({y64}, {upstream.to(DType::F64)});
  autograd::backward({y_cpu}, {upstream});
  autograd::backward({y_gpu}, {upstream.to(Device::cuda(0))});
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    ASSERT_TRUE(in64[i].grad().defined() && cpu_in[i].grad().defined() && gpu_in[i].grad().defined())
        << "input " << i << " has no gradient";
    const double c = max_abs_difference(cpu_in[i].grad(), in64[i].grad());
    const double g = max_abs_difference(gpu_in[i].grad(), in64[i].grad());
    EXPECT_LE(g, 2 * c + atol) << "gradient of input " << i << ": CUDA float32 " << g << " from float64, CPU "
                               << c;
  }
}

// op on float32 copies of float64 inputs agrees with op on the float64 inputs within atol + rtol * |f64|.
inline ::testing::AssertionResult float32_matches_float64(const NnOp& op, const std::vector<Tensor>& inputs,
                                                          double atol, double rtol) {
  autograd::NoGradGuard no_grad;
  Tensor y64 = op(leaves_on(inputs, Device::cpu(), DType::F64));
  Tensor y32 = op(leaves_on(inputs, Device::cpu(), DType::F32));
  if (y32.dtype() != DType::F32)
    return ::testing::AssertionFailure() << "float32 op gave " << dtype_name(y32.dtype());
  return all_close(y32, y64, atol, rtol);
}

// Row-major double copy of a tensor.
inline std::vector<double> values(const Tensor& t) { return t.to_double_vector(); }

}  // namespace ddp::testing
