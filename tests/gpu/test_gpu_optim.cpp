// test_gpu_optim.cpp - the CUDA AdamW and SGD kernels (kernels/cuda/optim.cu) against the CPU fused kernels:
// float32 state after one AdamW step equals (1 - beta) * g (and * g) with 1 - beta formed in double, as on
// the CPU (1 - 0.999f would put v off by 1.3e-5 relative), and CUDA and CPU agree on the moments bitwise and
// on the weights to float rounding. Skips with "skipped: no GPU".
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/optim/optimizer.h"
#include "tests/support/gradcheck.h"

using namespace ddp;
using ddp::testing::all_close;

namespace {
std::vector<double> values(int64_t n, double scale, int salt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = scale * std::sin(0.37 * static_cast<double>(i + 1) * salt);
  return v;
}
nn::NamedTensor param(const std::vector<double>& v, Device dev) {
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F64).to(DType::F32).to(dev);
  t.set_requires_grad(true);
  return {"w", t};
}
std::vector<double> host(const Tensor& t) { return t.to(Device::cpu()).to_double_vector(); }
}  // namespace

TEST(GpuOptim, AdamWFloat32ConstantsFormedInDoubleAndEqualToTheCpuKernel) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  const int64_t n = 1000;
  const std::vector<double> g = values(n, 0.5, 3);
  std::map<std::string, Tensor> state[2];
  std::vector<double> w[2];
  for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
    const Device dev = on_gpu ? Device::cuda(0) : Device::cpu();
    auto p = param(values(n, 1.0, 1), dev);
    optim::AdamW adam({p}, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
    p.tensor.set_grad(Tensor::from_vector(g, {n}, DType::F64).to(DType::F32).to(dev));
    adam.step();
    device_synchronize();
    state[on_gpu] = adam.state();
    w[on_gpu] = host(p.tensor);
  }
  std::vector<double> v_ref, m_ref;
  for (double gi : g) {
    const double gf = static_cast<float>(gi);
    v_ref.push_back((1 - 0.999) * gf * gf);
    m_ref.push_back((1 - 0.9) * gf);
  }
  EXPECT_TRUE(all_close(state[1].at("w.exp_avg_sq").to(Device::cpu()), v_ref, 0, 1e-6)) << "CUDA v";
  EXPECT_TRUE(all_close(state[1].at("w.exp_avg").to(Device::cpu()), m_ref, 0, 1e-6)) << "CUDA m";
  EXPECT_TRUE(host(state[1].at("w.exp_avg")) == host(state[0].at("w.exp_avg"))) << "m: CUDA != CPU bitwise";
  EXPECT_TRUE(host(state[1].at("w.exp_avg_sq")) == host(state[0].at("w.exp_avg_sq")))
      << "v: CUDA != CPU bitwise";
  Tensor w_gpu = Tensor::from_vector(w[1], {n}, DType::F64);
  EXPECT_TRUE(all_close(w_gpu, w[0], 1e-7, 1e-6)) << "weights: CUDA vs CPU";
}

TEST(GpuOptim, SgdWithMomentumDampeningAndNesterovMatchesTheCpuKernel) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  const int64_t n = 777;
  std::vector<double> w[2];
  for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
    const Device dev = on_gpu ? Device::cuda(0) : Device::cpu();
    for (bool nesterov : {false, true}) {
      auto p = param(values(n, 1.0, 1), dev);
      optim::SGD sgd({p}, {.lr = 0.05,
                           .momentum = 0.9,
                           .dampening = nesterov ? 0.0 : 0.3,
                           .weight_decay = 0.01,
                           .nesterov = nesterov});
      for (int step = 0; step < 3; ++step) {
        p.tensor.set_grad(
            Tensor::from_vector(values(n, 0.5, step + 2), {n}, DType::F64).to(DType::F32).to(dev));
        sgd.step();
      }
      device_synchronize();
      auto h = host(p.tensor);
      w[on_gpu].insert(w[on_gpu].end(), h.begin(), h.end());
    }
  }
  Tensor w_gpu = Tensor::from_vector(w[1], {static_cast<int64_t>(w[1].size())}, DType::F64);
  EXPECT_TRUE(all_close(w_gpu, w[0], 1e-7, 1e-6)) << "SGD weights: CUDA vs CPU";
}
