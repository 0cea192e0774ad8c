// test_gpu_determinism.cpp - determinism on the GPU: the CUDA embedding backward is bitwise repeatable and
// bitwise equal to the CPU kernel (same summation order), and a GPT training run on the GPU stopped at step k
// and resumed from its checkpoint ends bitwise equal to an uninterrupted run (the atomic embedding backward
// failed this). Two ranks share the GPU through the Gloo-staged path. Skips with "skipped: no GPU".
#include <gtest/gtest.h>

#include <filesystem>

#include "models/train.h"
#include "runtime/autograd/engine.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/reduce.h"

using namespace ddp;

namespace {
bool have_gpu() { return cuda_device_count() > 0; }
std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}
// d(sum(embedding(W, idx) * g))/dW on `dev`, as float32 values on the host.
std::vector<float> embedding_grad(Device dev, const Tensor& w_host, const Tensor& idx_host,
                                  const Tensor& g_host) {
  Tensor w = w_host.to(dev).detach();
  w.set_requires_grad(true);
  Tensor out = ops::embedding(w, idx_host.to(dev));
  autograd::backward(ops::sum(out * g_host.to(dev)));
  Tensor gw = w.grad().to(Device::cpu());
  return std::vector<float>(gw.data<float>(), gw.data<float>() + gw.numel());
}
}  // namespace

TEST(GpuDeterminism, EmbeddingBackwardIsRepeatableAndEqualsTheCpuKernelBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  const int64_t vocab = 50, cols = 70, n = 4096;  // ~80 occurrences per row: atomics reorder these sums
  std::vector<int64_t> idx(n);
  uint64_t s = 7;
  for (auto& v : idx) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int64_t>((s >> 33) % vocab);
  }
  Tensor idx_host = Tensor::from_data<int64_t>(idx, {n});
  Tensor w = Tensor::randn({vocab, cols}, 1);
  Tensor g = Tensor::randn({n, cols}, 2);
  auto cpu = embedding_grad(Device::cpu(), w, idx_host, g);
  auto gpu1 = embedding_grad(Device::cuda(0), w, idx_host, g);
  auto gpu2 = embedding_grad(Device::cuda(0), w, idx_host, g);
  EXPECT_TRUE(gpu1 == gpu2) << "two identical CUDA embedding backwards differ";
  EXPECT_TRUE(gpu1 == cpu) << "the CUDA embedding backward is not bitwise equal to the CPU kernel";
}

TEST(GpuDeterminism, GptStoppedAndResumedOnTheGpuEqualsUninterruptedBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU";
  const auto dir =
      (std::filesystem::temp_directory_path() / ("ddp_gpu_resume_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  models::TrainOptions o;
  o.model = "gpt";
  o.data = "synthetic";
  o.device = "cuda";
  o.quiet = true;
  o.steps = 10;
  o.warmup_steps = 2;
  o.batch_size = 16;
  o.eval_batches = 1;
  o.eval_interval = 0;
  o.synthetic_samples = 512;
  o.context = 16;
  o.d_model = 32;
  o.n_head = 2;
  o.n_layer = 2;
  o.sample_tokens = 0;
  o.lr = 1e-2;
  o.dropout = 0.1;
  std::vector<models::TrainResult> full(2), resumed(2);
  dist::run_threads(2, [&](int rank, dist::ProcessGroup& pg) { full[rank] = models::train(o, borrow(pg)); });
  models::TrainOptions first = o;
  first.checkpoint_dir = dir;
  first.stop_after = 4;
  dist::run_threads(2, [&](int, dist::ProcessGroup& pg) { models::train(first, borrow(pg)); });
  models::TrainOptions second = o;
  second.checkpoint_dir = dir;
  second.resume = "auto";
  dist::run_threads(
      2, [&](int rank, dist::ProcessGroup& pg) { resumed[rank] = models::train(second, borrow(pg)); });
  EXPECT_EQ(resumed[0].steps_done, 10);
  EXPECT_TRUE(resumed[0].final_params == full[0].final_params) << "GPU resume is not bitwise identical";
  EXPECT_TRUE(resumed[1].final_params == full[1].final_params) << "rank 1";
  std::filesystem::remove_all(dir);
}
