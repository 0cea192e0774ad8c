// test_cudnn_attention.cpp - the bf16 attention through cuDNN's fused attention (kernels/cuda/cudnn_attention):
// on the CPU, the strided views cuDNN is given (kernels/cuda/sdpa_layout.h) address exactly the elements the CPU
// kernels index, once each, and unsupported shapes are refused by name; on a GPU (skipped without one, or
// without the cuDNN frontend in the build), forward and qkv gradient against the CPU's bf16 emulation and the
// float64 op, over sequence lengths around cuDNN's tiles and head sizes 8..128 (a shape cuDNN's own check refuses
// is named on stdout and checked on the fallback; GPT-2's shapes must run on cuDNN); a second call of a shape
// builds no graph; heads it does not take and DDP_CUDNN_ATTENTION=0 keep the materialising kernels; no (T, T)
// buffer.
//
// Tolerance: bf16 keeps 8 significant bits (relative step 2^-8 = 0.0039). cuDNN rounds q, k, v, y (and dy,
// dq, dk, dv) to bf16 as the emulation does, but it also rounds the unnormalised tile probabilities before P V
// and sums in another order, so outputs differ by a few bf16 steps: max |cuda - ref| <= 2e-2 max |ref| per
// tensor (5 steps of the largest element).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "kernels/cuda/sdpa_layout.h"
#include "runtime/core/device_memory.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/mixed_precision.h"
#include "tests/ops_nn/ops_nn_test_util.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/cudnn_attention.h"
#endif

using namespace ddp;
using namespace ddp::testing;
using kernels::cuda::sdpa_layout;
using kernels::cuda::sdpa_offset;
using kernels::cuda::sdpa_unsupported_reason;

namespace {
struct Shape4 {
  int64_t B, T, C, nh;
};
const Shape4 kLayoutShapes[] = {{1, 1, 8, 1}, {2, 3, 16, 2}, {3, 5, 24, 3}, {2, 7, 64, 1}, {1, 4, 256, 2}};
}  // namespace

TEST(SdpaLayout, QkvViewsAddressTheElementsTheCpuKernelsIndexOnceEach) {
  for (const Shape4& s : kLayoutShapes) {
    SCOPED_TRACE("B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " C " + std::to_string(s.C));
    const auto l = sdpa_layout(s.B, s.T, s.C, s.nh);
    const int64_t hs = s.C / s.nh;
    ASSERT_EQ(l.dims[0], s.B);
    ASSERT_EQ(l.dims[1], s.nh);
    ASSERT_EQ(l.dims[2], s.T);
    ASSERT_EQ(l.dims[3], hs);
    const int64_t part_offset[3] = {l.q_offset, l.k_offset, l.v_offset};
    std::set<int64_t> seen;
    for (int part = 0; part < 3; ++part)
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.nh; ++h)
          for (int64_t t = 0; t < s.T; ++t)
            for (int64_t d = 0; d < hs; ++d) {
              // kernels/cpu/attention: qkv[b, t, part * C + h * hs + d]
              const int64_t cpu = (b * s.T + t) * 3 * s.C + part * s.C + h * hs + d;
              const int64_t view = part_offset[part] + sdpa_offset(l.qkv_stride, b, h, t, d);
              ASSERT_EQ(view, cpu) << "part " << part << " (" << b << ", " << h << ", " << t << ", " << d << ")";
              seen.insert(view);
            }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), s.B * s.T * 3 * s.C);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), s.B * s.T * 3 * s.C - 1);
  }
}

TEST(SdpaLayout, OutputAndStatisticsViewsArePackedInTheCpuOrder) {
  for (const Shape4& s : kLayoutShapes) {
    const auto l = sdpa_layout(s.B, s.T, s.C, s.nh);
    const int64_t hs = s.C / s.nh;
    std::set<int64_t> out, stats;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.nh; ++h)
        for (int64_t t = 0; t < s.T; ++t) {
          for (int64_t d = 0; d < hs; ++d) {
            const int64_t view = sdpa_offset(l.out_stride, b, h, t, d);
            ASSERT_EQ(view, (b * s.T + t) * s.C + h * hs + d);  // y[b, t, h * hs + d]
            out.insert(view);
          }
          const int64_t st = sdpa_offset(l.stats_stride, b, h, t, 0);
          ASSERT_EQ(st, (b * s.nh + h) * s.T + t);  // (B, n_head, T)
          stats.insert(st);
        }
    EXPECT_EQ(static_cast<int64_t>(out.size()), s.B * s.T * s.C);
    EXPECT_EQ(static_cast<int64_t>(stats.size()), s.B * s.nh * s.T);
    EXPECT_EQ(l.stats_dims[3], 1);
  }
}

TEST(SdpaLayout, ShapesCudnnDoesNotTakeAreRefusedWithTheReason) {
  EXPECT_EQ(sdpa_unsupported_reason(2, 64, 768, 12), nullptr);  // GPT-2 small
  EXPECT_EQ(sdpa_unsupported_reason(1, 1, 8, 1), nullptr);
  EXPECT_EQ(sdpa_unsupported_reason(1, 5, 256, 2), nullptr);  // head 128: the largest taken
  const auto reason = [](int64_t B, int64_t T, int64_t C, int64_t nh) {
    const char* r = sdpa_unsupported_reason(B, T, C, nh);
    return std::string(r ? r : "");
  };
  EXPECT_NE(reason(1, 4, 12, 1).find("multiple of 8"), std::string::npos);
  EXPECT_EQ(reason(2, 4, 96, 4).find("multiple of 8"), std::string::npos) << "head 24 is a multiple of 8";
  EXPECT_NE(reason(1, 4, 136, 1).find("above 128"), std::string::npos);
  EXPECT_NE(reason(1, 0, 64, 1).find("empty"), std::string::npos);
  EXPECT_NE(reason(0, 4, 64, 1).find("empty"), std::string::npos);
  EXPECT_NE(reason(1, 4, 64, 3).find("ill-formed"), std::string::npos);
}

TEST(SdpaLayout, TheCpuRunsTheEmulation) {
  Tensor qkv = Tensor::randn({1, 4, 3 * 64}, 1, DType::F32);
  EXPECT_STREQ(ops::bf16_attention_kernel(qkv, 2), "materialising (CPU emulation)");
}

#ifdef DDP_WITH_CUDA
namespace {
#define DDP_SKIP_WITHOUT_CUDNN_ATTENTION()                                                         \
  DDP_SKIP_WITHOUT_GPU();                                                                         \
  if (!kernels::cuda::cudnn_attention_compiled())                                                  \
  GTEST_SKIP() << "skipped: built without the cuDNN frontend (tools/fetch_cudnn_frontend.sh, then " \
                  "reconfigure)"


// The bf16 op on CUDA against the CPU's bf16 emulation and the float64 op: output and qkv gradient. `kernel`:
// the kernels expected; with `strict` false a shape cuDNN itself refuses is reported (the message on stdout,
// gpu_check's log) and still checked on the materialising kernels.
void expect_cudnn_matches(int64_t B, int64_t T, int64_t C, int64_t nh, const char* kernel = "cudnn",
                          bool strict = false) {
  SCOPED_TRACE("B " + std::to_string(B) + ", T " + std::to_string(T) + ", C " + std::to_string(C) +
               ", heads " + std::to_string(nh));
  const Tensor source = random_f64({B, T, 3 * C}, 300 + T + C);
  const Tensor upstream = Tensor::randn({B, T, C}, 301 + T, DType::F64);
  Tensor gpu = leaves_on({source}, Device::cuda(0), DType::F32)[0];
  Tensor cpu = leaves_on({source}, Device::cpu(), DType::F32)[0];
  Tensor f64 = leaves_on({source}, Device::cpu(), DType::F64)[0];
  Tensor y_gpu, y_cpu;
  {
    ops::Bf16Compute on;
    const std::string why = ops::bf16_attention_not_cudnn(gpu.device(), B, T, C, nh);
    if (!strict && std::string(kernel) == "cudnn" && why.rfind("cuDNN refused", 0) == 0)
      std::printf("note: B %lld T %lld C %lld heads %lld: %s\n", static_cast<long long>(B),
                  static_cast<long long>(T), static_cast<long long>(C), static_cast<long long>(nh), why.c_str());
    else
      ASSERT_STREQ(ops::bf16_attention_kernel(gpu, nh), kernel) << why;
    y_gpu = ops::causal_self_attention(gpu, nh);
    y_cpu = ops::causal_self_attention(cpu, nh);
    autograd::backward({y_gpu}, {upstream.to(DType::F32).to(Device::cuda(0))});
    autograd::backward({y_cpu}, {upstream.to(DType::F32)});
  }
  Tensor y64 = ops::causal_self_attention(f64, nh);
  autograd::backward({y64}, {upstream});
  EXPECT_TRUE(close_relative_to_max(y_gpu, y_cpu, 2e-2)) << "forward vs the CPU emulation";
  EXPECT_TRUE(close_relative_to_max(y_gpu, y64, 2e-2)) << "forward vs float64";
  ASSERT_TRUE(gpu.grad().defined());
  EXPECT_TRUE(close_relative_to_max(gpu.grad(), cpu.grad(), 2e-2)) << "dqkv vs the CPU emulation";
  EXPECT_TRUE(close_relative_to_max(gpu.grad(), f64.grad(), 2e-2)) << "dqkv vs float64";
}
}  // namespace

TEST(CudnnAttention, MatchesTheCpuEmulationAndFloat64) {
  DDP_SKIP_WITHOUT_CUDNN_ATTENTION();
  const int64_t lengths[] = {1, 2, 63, 64, 65, 127, 129, 200};
  const int64_t heads[] = {8, 16, 64, 128};
  const int64_t batch_heads[][2] = {{1, 1}, {3, 2}, {2, 4}, {1, 3}};
  int k = 0;
  for (int64_t T : lengths)
    for (int64_t hs : heads) {
      const auto& bn = batch_heads[k++ % 4];
      expect_cudnn_matches(bn[0], T, hs * bn[1], bn[1]);
    }
}

TEST(CudnnAttention, Gpt2SmallShapeRunsOnCudnn) {
  DDP_SKIP_WITHOUT_CUDNN_ATTENTION();
  expect_cudnn_matches(2, 256, 768, 12, "cudnn", /*strict=*/true);
  expect_cudnn_matches(1, 1024, 768, 12, "cudnn", /*strict=*/true);
}

TEST(CudnnAttention, ASecondCallOfAShapeBuildsNoGraph) {
  DDP_SKIP_WITHOUT_CUDNN_ATTENTION();
  expect_cudnn_matches(2, 40, 128, 2, "cudnn", true);
  const int64_t built = kernels::cuda::cudnn_attention_graphs_built();
  expect_cudnn_matches(2, 40, 128, 2, "cudnn", true);
  EXPECT_EQ(kernels::cuda::cudnn_attention_graphs_built(), built);
}

TEST(CudnnAttention, HeadsItDoesNotTakeAndTheSwitchKeepTheMaterialisingKernels) {
  DDP_SKIP_WITHOUT_CUDNN_ATTENTION();
  expect_cudnn_matches(2, 33, 2 * 12, 2, "materialising (cuBLAS)");   // head 12
  expect_cudnn_matches(1, 33, 160, 1, "materialising (cuBLAS)");      // head 160
  ::setenv("DDP_CUDNN_ATTENTION", "0", 1);
  expect_cudnn_matches(2, 33, 128, 2, "materialising (cuBLAS)");
  ::unsetenv("DDP_CUDNN_ATTENTION");
  expect_cudnn_matches(2, 33, 128, 2, "cudnn");
}

TEST(CudnnAttention, HoldsNoTByTBuffer) {
  DDP_SKIP_WITHOUT_CUDNN_ATTENTION();
  // GPT-2 small at T = 1024 in bf16: the (B, heads, T, T) float32 probabilities of the materialising kernels
  // would be 96 MiB; cuDNN keeps bf16 q/k/v/y copies, the statistics and its workspace.
  const int64_t B = 2, T = 1024, C = 768, nh = 12;
  const int64_t probabilities_bytes = B * nh * T * T * static_cast<int64_t>(sizeof(float));
  Tensor qkv = Tensor::randn({B, T, 3 * C}, 8, DType::F32).to(Device::cuda(0));
  qkv.set_requires_grad(true);
  Tensor upstream = Tensor::randn({B, T, C}, 9, DType::F32).to(Device::cuda(0));
  ops::Bf16Compute on;
  autograd::backward({ops::causal_self_attention(qkv, nh)}, {upstream});  // graphs built, workspace sized
  device_synchronize();
  const int64_t in_use = device_memory(0).pool_used;
  reset_device_memory_peak(0);
  autograd::backward({ops::causal_self_attention(qkv, nh)}, {upstream});
  device_synchronize();
  const DeviceMemory m = device_memory(0);
  ASSERT_TRUE(m.valid);
  EXPECT_LT(m.pool_used_peak - in_use, probabilities_bytes)
      << "the pool's peak rose by " << (m.pool_used_peak - in_use) << " bytes";
}
#endif
