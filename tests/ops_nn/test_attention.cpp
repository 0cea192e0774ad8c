// test_attention.cpp - causal_self_attention against a plain float64 reference (explicit loops over batch,
// head, query, key), causality, gradcheck (GPT-2 shapes in miniature, and contexts around the CPU kernels'
// 32-row blocks), float32 vs float64, CUDA parity.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/gemm_blis.h"
#include "runtime/ops/attention.h"
#include "tests/ops_nn/ops_nn_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
// y (B, T, C) from qkv (B, T, 3C) by the textbook definition.
std::vector<double> reference(const std::vector<double>& qkv, int64_t B, int64_t T, int64_t C, int64_t nh) {
  const int64_t hs = C / nh;
  std::vector<double> y(B * T * C, 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
    return qkv[(b * T + t) * 3 * C + part * C + h * hs + d];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> p(i + 1);
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d) dot += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          p[j] = dot / std::sqrt(static_cast<double>(hs));
          m = std::max(m, p[j]);
        }
        for (int64_t j = 0; j <= i; ++j) s += (p[j] = std::exp(p[j] - m));
        for (int64_t d = 0; d < hs; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += p[j] / s * at(b, j, 2, h, d);
          y[(b * T + i) * C + h * hs + d] = acc;
        }
      }
  return y;
}
struct Case {
  int64_t B, T, C, nh;
};
const std::vector<Case> kCases = {{2, 5, 8, 2}, {1, 1, 4, 1}, {1, 3, 6, 3}, {3, 4, 6, 1}, {1, 7, 5, 5}};
}  // namespace

TEST(Attention, MatchesReference) {
  for (const Case& c : kCases) {
    Tensor qkv = random_f64({c.B, c.T, 3 * c.C}, 1, false);
    Tensor y = ops::causal_self_attention(qkv, c.nh);
    ASSERT_EQ(y.shape(), (Shape{c.B, c.T, c.C}));
    EXPECT_TRUE(all_close(y, reference(values(qkv), c.B, c.T, c.C, c.nh), 1e-13, 1e-12))
        << c.B << "," << c.T << "," << c.C << "," << c.nh;
  }
}

// The CPU kernels run the products on blocks of 32 score rows, each against the keys it can see
// (kernels/cpu/attention.cpp, kAttentionRowBlock): contexts on either side of one, two and three blocks, and
// a prime, forward against the reference and backward by finite differences.
TEST(Attention, MatchesReferenceAndGradcheckAcrossTheRowBlocks) {
  for (const int64_t T : {31, 32, 33, 63, 64, 65, 97}) {
    const Case c{1, T, 4, 2};
    Tensor qkv = random_f64({c.B, c.T, 3 * c.C}, 11, false);
    EXPECT_TRUE(all_close(ops::causal_self_attention(qkv, c.nh), reference(values(qkv), c.B, c.T, c.C, c.nh),
                          1e-13, 1e-12))
        << "T " << T;
    const int64_t nh = c.nh;
    EXPECT_TRUE(
        gradcheck([nh](const std::vector<Tensor>& in) { return ops::causal_self_attention(in[0], nh); },
                  {random_f64({c.B, c.T, 3 * c.C}, 12)}, 1e-6, 1e-6, 1e-4))
        << "T " << T;
  }
}

// The float32 products go to the GEMM library the rule (or DDP_GEMM / set_gemm_backend) picks: the row
// blocks' strided, offset operands (kernels/cpu/attention.cpp) on each library this build can load, forward
// and backward against float64 (which always runs on OpenBLAS), at the default gpt's head size and contexts
// around the 32-row blocks.
TEST(Attention, EveryGemmLibraryMatchesFloat64AcrossTheRowBlocks) {
  using kernels::cpu::GemmBackend;
  std::vector<GemmBackend> libraries = {GemmBackend::OpenBLAS};
  if (kernels::cpu::onednn_available()) libraries.push_back(GemmBackend::OneDNN);
  if (kernels::cpu::blis_available()) libraries.push_back(GemmBackend::BLIS);
  const GemmBackend saved = kernels::cpu::gemm_backend();
  for (const GemmBackend library : libraries) {
    kernels::cpu::set_gemm_backend(library);
    for (const int64_t T : {31, 33, 64, 65}) {
      SCOPED_TRACE(std::string(kernels::cpu::gemm_backend_name(library)) + " T " + std::to_string(T));
      const int64_t B = 2, C = 64, nh = 2;  // head size 32
      const kernels::cpu::GemmCounts before = kernels::cpu::gemm_counts();
      std::vector<Tensor> in64 = {random_f64({B, T, 3 * C}, 21, true)};
      std::vector<Tensor> in32 = leaves_on(in64, Device::cpu(), DType::F32);
      Tensor y64 = ops::causal_self_attention(in64[0], nh), y32 = ops::causal_self_attention(in32[0], nh);
      EXPECT_TRUE(all_close(y32, y64, 2e-5, 2e-5)) << "forward";
      Tensor upstream = Tensor::randn(y64.shape(), 22, DType::F64);
      autograd::backward({y64}, {upstream});
      autograd::backward({y32}, {upstream.to(DType::F32)});
      EXPECT_TRUE(all_close(in32[0].grad(), in64[0].grad(), 1e-4, 1e-4)) << "gradient of qkv";
      const kernels::cpu::GemmCounts after = kernels::cpu::gemm_counts();
      if (library == GemmBackend::OneDNN)
        EXPECT_GT(after.onednn, before.onednn) << "the products ran elsewhere";
      if (library == GemmBackend::BLIS) EXPECT_GT(after.blis, before.blis) << "the products ran elsewhere";
    }
  }
  kernels::cpu::set_gemm_backend(saved);
}

TEST(Attention, FutureTokensDoNotAffectThePast) {
  const int64_t B = 1, T = 6, C = 4;
  Tensor qkv = random_f64({B, T, 3 * C}, 2, false);
  std::vector<double> a = values(ops::causal_self_attention(qkv, 2));
  double* p = qkv.data<double>();
  for (int64_t k = 0; k < 3 * C; ++k) p[(T - 1) * 3 * C + k] += 5.0;  // change only the last token
  std::vector<double> b = values(ops::causal_self_attention(qkv, 2));
  for (int64_t i = 0; i < (T - 1) * C; ++i) EXPECT_EQ(a[i], b[i]) << i;
  bool last_changed = false;
  for (int64_t i = (T - 1) * C; i < T * C; ++i) last_changed |= a[i] != b[i];
  EXPECT_TRUE(last_changed);
}

TEST(Attention, Gradcheck) {
  for (const Case& c : kCases) {
    const int64_t nh = c.nh;
    EXPECT_TRUE(
        gradcheck([nh](const std::vector<Tensor>& in) { return ops::causal_self_attention(in[0], nh); },
                  {random_f64({c.B, c.T, 3 * c.C}, 3)}, 1e-6, 1e-6, 1e-4))
        << c.B << "," << c.T << "," << c.C << "," << c.nh;
  }
}

TEST(Attention, Float32MatchesFloat64) {
  EXPECT_TRUE(float32_matches_float64(
      [](const std::vector<Tensor>& in) { return ops::causal_self_attention(in[0], 4); },
      {random_f64({2, 17, 3 * 32}, 4, false)}, 1e-5, 1e-5));
}

TEST(Attention, RejectsBadShapes) {
  EXPECT_THROW(ops::causal_self_attention(random_f64({2, 5, 7}, 1, false), 1), Error);   // 7 not 3C
  EXPECT_THROW(ops::causal_self_attention(random_f64({2, 5, 24}, 1, false), 3), Error);  // C=8 % 3
  EXPECT_THROW(ops::causal_self_attention(random_f64({5, 24}, 1, false), 2), Error);     // not 3-D
}

TEST(Attention, CudaMatchesCpu) {
  DDP_SKIP_WITHOUT_GPU();
  // float32 both sides (cuBLAS vs OpenBLAS summation order): bound 1e-5 absolute + 1e-4 relative.
  for (const Case& c : std::vector<Case>{{2, 5, 8, 2}, {2, 64, 96, 4}, {1, 33, 12, 3}}) {
    const int64_t nh = c.nh;
    expect_cuda_matches_cpu(
        [nh](const std::vector<Tensor>& in) { return ops::causal_self_attention(in[0], nh); },
        {random_f64({c.B, c.T, 3 * c.C}, 7)}, 1e-5, 1e-4);
  }
}
