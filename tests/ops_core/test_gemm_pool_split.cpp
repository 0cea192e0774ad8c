// test_gemm_pool_split.cpp - at a thread budget above 1, the float products the 1-thread rule gives to oneDNN
// run as blocks of C's rows or columns on the intra-op pool, each a 1-thread dnnl_sgemm
// (kernels/cpu/gemm.cpp): every block boundary, both split sides and every layout (transposes, leading
// dimensions wider than the rows, beta 0 and 1) matches the float64 product within the float32 bound, the
// padding past C's rows stays untouched, the blocks are counted as oneDNN calls, and shapes outside the rule,
// forced libraries, calls from inside a pool task and one GEMM thread under a larger pool (train
// --deterministic) take the old paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/parallel.h"

using namespace ddp::kernels::cpu;

namespace {
class GemmPoolSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onednn_available()) GTEST_SKIP() << "this build has no oneDNN: nothing runs as row blocks";
    saved_backend_ = gemm_backend();
    saved_budget_ = thread_budget();
    set_gemm_backend(GemmBackend::Auto);
  }
  void TearDown() override {
    if (!onednn_available()) return;
    set_gemm_backend(saved_backend_);
    set_thread_budget(saved_budget_);
  }

 private:
  GemmBackend saved_backend_ = GemmBackend::Auto;
  int saved_budget_ = 1;
};

struct Product {
  bool ta, tb;
  int64_t M, N, K, pad;
  float beta;
  std::vector<float> A, B, C;
  int64_t lda() const { return (ta ? M : K) + pad; }
  int64_t ldb() const { return (tb ? K : N) + pad; }
  int64_t ldc() const { return N + pad; }
  Product(bool ta_, bool tb_, int64_t M_, int64_t N_, int64_t K_, int64_t pad_, float beta_, uint64_t seed)
      : ta(ta_), tb(tb_), M(M_), N(N_), K(K_), pad(pad_), beta(beta_) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd;
    A.resize((ta ? K : M) * lda());
    B.resize((tb ? N : K) * ldb());
    C.resize(M * ldc());
    for (float& v : A) v = nd(rng);
    for (float& v : B) v = nd(rng);
    for (float& v : C) v = nd(rng);
  }
  std::vector<float> run() const {
    std::vector<float> out = C;
    gemm_ld(ta, tb, M, N, K, kAlpha, A.data(), lda(), B.data(), ldb(), beta, out.data(), ldc());
    return out;
  }
  // Every entry within 2 (K + 2) u (|alpha| (|A||B|)_ij + |beta C0_ij|) of the float64 product (u = 2^-24:
  // any summation order, FMA or not), and the padding past each row of C untouched.
  ::testing::AssertionResult matches_float64(const std::vector<float>& out) const {
    const double u = std::ldexp(1.0, -24);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double a = A[ta ? k * lda() + i : i * lda() + k], b = B[tb ? j * ldb() + k : k * ldb() + j];
          sum += a * b;
          mag += std::fabs(a * b);
        }
        const double c0 = C[i * ldc() + j], ref = kAlpha * sum + beta * c0;
        const double tol = 2.0 * (K + 2) * u * (kAlpha * mag + std::fabs(beta * c0));
        if (!(std::fabs(out[i * ldc() + j] - ref) <= tol))
          return ::testing::AssertionFailure() << "C[" << i << "," << j << "] = " << out[i * ldc() + j]
                                               << ", float64 " << ref << ", tolerance " << tol;
      }
      for (int64_t j = N; j < ldc(); ++j)
        if (std::memcmp(&out[i * ldc() + j], &C[i * ldc() + j], sizeof(float)) != 0)
          return ::testing::AssertionFailure() << "padding C[" << i << "," << j << "] was written";
    }
    return ::testing::AssertionSuccess();
  }
  static constexpr float kAlpha = 0.75f;
};
}  // namespace

// Sides around the block boundaries (32 at least, edges on multiples of 16, 2 and 3 blocks), split by rows
// (M >= N) and by columns (the mlp's batch of 64 against 1024 or 130 columns), the model shapes (the gpt's
// 1024-token linears, the mlp's layers and its weight gradient, 1024 x 1024 x 64, whose row blocks do not
// give the last bits of one call), every transpose pair, padded rows, beta 0 and 1.
TEST_F(GemmPoolSplit, EveryBoundaryAndLayoutMatchesFloat64) {
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{64, 128, 128},   {65, 128, 160},   {95, 256, 128},   {96, 128, 128},
                          {97, 130, 129},   {127, 128, 128},  {1024, 384, 128}, {1024, 128, 512},
                          {64, 1024, 784},  {64, 1024, 1024}, {64, 130, 256},   {48, 300, 160},
                          {128, 512, 1024}, {1024, 1024, 64}};
  uint64_t seed = 1;
  for (const Shape& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t pad : {0, 3})
          for (float beta : {0.0f, 1.0f}) {
            if (s.M * s.N * s.K > (1 << 22) && (pad != 0 || beta == 0.0f)) continue;  // the reference's time
            SCOPED_TRACE(::testing::Message() << "M " << s.M << " N " << s.N << " K " << s.K << " ta " << ta
                                              << " tb " << tb << " pad " << pad << " beta " << beta);
            const Product p(ta, tb, s.M, s.N, s.K, pad, beta, seed++);
            for (int budget : {2, 3}) {
              set_thread_budget(budget);
              const GemmCounts before = gemm_counts();
              const std::vector<float> split = p.run();
              const GemmCounts after = gemm_counts();
              // Blocks of at least 32 along the longer side (or the other): 2 or 3 calls, never OpenBLAS.
              EXPECT_GE(after.onednn - before.onednn, 2) << "budget " << budget;
              EXPECT_LE(after.onednn - before.onednn, budget) << "budget " << budget;
              EXPECT_EQ(after.openblas, before.openblas) << "budget " << budget;
              ASSERT_TRUE(p.matches_float64(split)) << "budget " << budget;
            }
          }
}

// Not split: fewer than two blocks of 32 along either side, blocks the 1-thread rule gives to OpenBLAS (the
// 10-wide output layer, small attention blocks), a forced library, float64, and a product inside a pool task
// (which runs its blocks serially: one oneDNN call on all rows).
TEST_F(GemmPoolSplit, OtherShapesLibrariesAndNestedCallsTakeTheOldPaths) {
  set_thread_budget(2);
  auto counts_of = [](const Product& p) {
    const GemmCounts before = gemm_counts();
    p.run();
    const GemmCounts after = gemm_counts();
    return std::make_pair(after.onednn - before.onednn, after.openblas - before.openblas);
  };
  EXPECT_EQ(counts_of(Product(false, true, 63, 63, 256, 0, 0.0f, 1)).first, 0) << "under two blocks of 32";
  EXPECT_EQ(counts_of(Product(false, true, 32, 97, 128, 0, 0.0f, 7)).first, 0)
      << "32 x 48 blocks: OpenBLAS's";
  EXPECT_EQ(counts_of(Product(false, true, 1024, 10, 128, 0, 0.0f, 2)).first, 0) << "10 wide";
  EXPECT_EQ(counts_of(Product(false, false, 64, 64, 32, 0, 0.0f, 3)).first, 0) << "attention block";
  set_gemm_backend(GemmBackend::OpenBLAS);
  EXPECT_EQ(counts_of(Product(false, true, 1024, 384, 128, 0, 0.0f, 4)).first, 0) << "OpenBLAS forced";
  set_gemm_backend(GemmBackend::OneDNN);
  EXPECT_EQ(counts_of(Product(false, true, 1024, 384, 128, 0, 0.0f, 5)).first, 1)
      << "oneDNN forced: one call";
  set_gemm_backend(GemmBackend::Auto);
  std::vector<double> A(128 * 128, 0.5), B(128 * 128, 0.25), C(128 * 128);
  const GemmCounts before = gemm_counts();
  gemm(false, false, 128, 128, 128, 1.0, A.data(), B.data(), 0.0, C.data());
  EXPECT_EQ(gemm_counts().onednn, before.onednn) << "float64 runs on OpenBLAS";
  // Inside a pool task: the product's blocks run serially in that task, one oneDNN call on all rows.
  set_parallel_split_always(true);
  const Product p(false, true, 1024, 384, 128, 0, 0.0f, 6);
  std::vector<int64_t> calls(2, -1);
  parallel_for(2, 1, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const GemmCounts c0 = gemm_counts();
      p.run();
      calls[t] = gemm_counts().onednn - c0.onednn;  // the other task's calls may land in between: >= 1
    }
  });
  set_parallel_split_always(false);
  EXPECT_GE(calls[0], 1);
  EXPECT_GE(calls[1], 1);
}

// train --deterministic runs the GEMMs on one thread and keeps the pool's budget (models/train.cpp): no
// blocks then, one oneDNN call per product, the bits of a budget of 1.
TEST_F(GemmPoolSplit, OneGemmThreadUnderALargerPoolKeepsOneCallPerProduct) {
  const Product p(false, false, 1024, 1024, 64, 0, 0.0f, 8);  // the mlp's weight gradient: blocks change bits
  set_thread_budget(1);
  const std::vector<float> one = p.run();
  set_thread_budget(2);
  set_blas_threads(1);
  const GemmCounts before = gemm_counts();
  const std::vector<float> pinned = p.run();
  EXPECT_EQ(gemm_counts().onednn - before.onednn, 1);
  EXPECT_EQ(std::memcmp(pinned.data(), one.data(), one.size() * sizeof(float)), 0);
  EXPECT_EQ(thread_budget(), 2) << "the pool keeps its budget";
}
