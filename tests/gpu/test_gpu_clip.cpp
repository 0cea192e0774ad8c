// test_gpu_clip.cpp - gradient-norm clipping on the device (optim::clip_grad_norm_tensor_, and ZeRO-2's
// ShardedDataParallel::clip_grad_norm_tensor_ under NCCL) against the CPU clip: the norm to 1e-12 relative
// (float64 sums in different orders), the clipped gradients bit for bit equal to the CPU's scale by the
// coefficient formed from the device's norm (and to the CPU clip itself to float32 rounding, 1e-6 relative),
// no device-to-host copy at all (detail::device_to_host_copies), the double variant exactly one. And the
// optimizers' multi-tensor steps on CUDA against the CPU optimizers: bit for bit on a CPU whose kernels fuse
// multiply-adds (AVX2, AVX-512), since both run kernels/cpu/optim_math.h's arithmetic. Skips with "skipped:
// no GPU".
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/simd_target.h"
#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/core/device.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"
#include "runtime/tensor/storage.h"
#include "runtime/tensor/tensor_math.h"
#include "tests/gpu/nccl_world_one.h"

using namespace ddp;

namespace {
bool have_gpu() { return cuda_device_count() > 0; }
Tensor param_with_grad(int64_t n, DType dtype, int salt, double scale, Device device) {
  std::vector<double> w(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    w[static_cast<size_t>(i)] = std::cos(0.11 * static_cast<double>(i) * salt);
    g[static_cast<size_t>(i)] = scale * std::sin(0.37 * static_cast<double>(i + 1) * salt);
  }
  Tensor p = Tensor::from_vector(w, {n}, DType::F64).to(dtype).to(device);
  p.set_requires_grad(true);
  p.set_grad(Tensor::from_vector(g, {n}, DType::F64).to(dtype).to(device));
  return p;
}
std::vector<Tensor> params_on(Device device) {
  std::vector<Tensor> ps;
  int salt = 1;
  for (int64_t n : {0, 1, 7, 13, 16383, 16384, 16385, 1000003})
    ps.push_back(param_with_grad(n, DType::F32, salt++, 0.01, device));
  ps.push_back(param_with_grad(31, DType::F64, salt++, 0.5, device));
  ps.push_back(param_with_grad(5, DType::F32, salt++, 1.0, device));
  ps.back().set_grad(Tensor());  // no gradient: skipped
  return ps;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return ha.dtype() == hb.dtype() && ha.numel() == hb.numel() &&
         std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}
bool fused_multiply_add_cpu() {
  const std::string name = kernels::cpu::simd_target_name();
  return name.rfind("AVX2", 0) == 0 || name.rfind("AVX3", 0) == 0 || name.rfind("AVX10", 0) == 0;
}
}  // namespace

TEST(GpuClip, DeviceClipEqualsTheCpuClipAndCopiesNothingToTheHost) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  for (double max_norm : {0.5, 1e9}) {  // clipped, and left alone
    std::vector<Tensor> cpu = params_on(Device::cpu()), gpu = params_on(Device::cuda(0));
    device_synchronize();
    const int64_t copies_before = detail::device_to_host_copies();
    const Tensor norm = optim::clip_grad_norm_tensor_(gpu, max_norm);
    device_synchronize();
    EXPECT_EQ(detail::device_to_host_copies(), copies_before) << "the device clip read something back";
    ASSERT_TRUE(norm.device().is_cuda());
    const double gpu_norm = norm.item();
    // The CPU's clip with the device's norm: the same double coefficient, the same x *= T(c).
    std::vector<Tensor> cpu_same_norm = params_on(Device::cpu());
    if (gpu_norm > max_norm)
      for (Tensor& p : cpu_same_norm) {
        Tensor g = p.grad();
        if (g.defined()) scale_(g, max_norm / (gpu_norm + 1e-6));
      }
    const double cpu_norm = optim::clip_grad_norm_(cpu, max_norm);
    EXPECT_NEAR(gpu_norm, cpu_norm, 1e-12 * cpu_norm) << "max_norm " << max_norm;
    for (size_t i = 0; i < gpu.size(); ++i) {
      if (!cpu[i].grad().defined()) {
        EXPECT_FALSE(gpu[i].grad().defined());
        continue;
      }
      EXPECT_TRUE(same_bits(gpu[i].grad(), cpu_same_norm[i].grad()))
          << "parameter " << i << ", max " << max_norm;
      const std::vector<double> a = gpu[i].grad().to_double_vector(), b = cpu[i].grad().to_double_vector();
      for (size_t j = 0; j < a.size(); ++j)
        ASSERT_NEAR(a[j], b[j], 1e-6 * std::fabs(b[j]) + 1e-30) << "parameter " << i << " element " << j;
    }
    const int64_t before_double = detail::device_to_host_copies();
    (void)optim::clip_grad_norm_(params_on(Device::cuda(0)), max_norm);
    EXPECT_EQ(detail::device_to_host_copies(), before_double + 1) << "the double variant reads the norm once";
  }
}

TEST(GpuClip, Zero2ClipsOnTheDeviceUnderNcclLikeThePlainClip) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  dist::run_threads(
      1,
      [&](int, dist::ProcessGroup&, dist::Store& store) {
        auto pg = ddp::testing::nccl_world_one(store, "clip-main");
        nn::manual_seed(5);
        auto model = std::make_shared<models::MLP>(models::MLPConfig{32, {64, 48}, 10, DType::F32});
        model->to(Device::cuda(0));
        nn::manual_seed(5);
        auto plain = std::make_shared<models::MLP>(models::MLPConfig{32, {64, 48}, 10, DType::F32});
        plain->to(Device::cuda(0));
        ShardOptions o;
        o.stage = 2;
        ShardedDataParallel sdp(model, pg, o);
        const Tensor x = Tensor::randn({8, 32}, 41).to(Device::cuda(0));
        std::vector<int64_t> y(8);
        for (int64_t i = 0; i < 8; ++i) y[static_cast<size_t>(i)] = i % 10;
        const Tensor t = Tensor::from_data(y, {8}).to(Device::cuda(0));
        autograd::backward(ops::cross_entropy(sdp.forward(x), t));
        autograd::backward(ops::cross_entropy(plain->forward(x), t));
        device_synchronize();
        const int64_t before = detail::device_to_host_copies();
        const Tensor norm = sdp.clip_grad_norm_tensor_(0.1);
        device_synchronize();
        EXPECT_EQ(detail::device_to_host_copies(), before) << "ZeRO-2's clip read something back";
        ASSERT_TRUE(norm.device().is_cuda());
        const double plain_norm = optim::clip_grad_norm_(plain->parameters(), 0.1);
        EXPECT_NEAR(norm.item(), plain_norm, 1e-6 * plain_norm)
            << "world 1: the shards hold the whole gradient";
      },
      dist::ProcessGroupOptions{});
}

TEST(GpuClip, MultiTensorOptimizersEqualTheCpuOptimizersBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  if (!fused_multiply_add_cpu()) GTEST_SKIP() << "the CPU kernels run " << kernels::cpu::simd_target_name();
  for (int which = 0; which < 2; ++which) {
    std::vector<Tensor> w[2];
    for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
      const Device dev = on_gpu ? Device::cuda(0) : Device::cpu();
      std::vector<Tensor> ps = params_on(dev);
      std::vector<nn::NamedTensor> named;
      for (size_t i = 0; i < ps.size(); ++i) named.push_back({"p" + std::to_string(i), ps[i]});
      std::unique_ptr<optim::Optimizer> opt;
      if (which == 0)
        opt = std::make_unique<optim::AdamW>(named, optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.01});
      else
        opt = std::make_unique<optim::SGD>(
            named, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
      for (int step = 0; step < 3; ++step) {
        if (step == 1) ps[2].set_grad(Tensor());  // a skipped parameter: its own step count falls behind
        if (step == 2) ps[2].set_grad(param_with_grad(ps[2].numel(), ps[2].dtype(), 99, 0.1, dev).grad());
        opt->step();
      }
      device_synchronize();
      w[on_gpu] = ps;
    }
    for (size_t i = 0; i < w[0].size(); ++i)
      EXPECT_TRUE(same_bits(w[0][i], w[1][i])) << (which == 0 ? "AdamW" : "SGD") << " parameter " << i;
  }
}
