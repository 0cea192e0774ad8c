// ops_nn_test_util.h - helpers shared by the tests of the neural-network ops: GPU skipping, the CUDA-vs-CPU
// parity check (outputs and input gradients), and float32-vs-float64 comparison.
#pragma once
#include <gtest/gtest.h>

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
