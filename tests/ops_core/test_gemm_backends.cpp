// test_gemm_backends.cpp - the CPU GEMM libraries (kernels/cpu/gemm_backend.h: OpenBLAS, oneDNN, BLIS loaded at
// run time): each one forced in turn
// against a float64 reference over every transpose combination, leading dimensions wider than the rows, alpha
// and beta, and the model shapes; the per-shape rule of DDP_GEMM=auto; oneDNN's thread count following the
// rank's budget in every calling thread; the error messages. Tests that need oneDNN skip without it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/gemm_blis.h"
#include "tests/support/run_process.h"

using namespace ddp::kernels::cpu;

namespace {
// Restores the process-wide setting and thread budget a test changes.
class GemmBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_backend_ = gemm_backend(), saved_threads_ = blas_threads(); }
  void TearDown() override { set_gemm_backend(saved_backend_), set_blas_threads(saved_threads_); }

 private:
  GemmBackend saved_backend_ = GemmBackend::Auto;
  int saved_threads_ = 1;
};

struct Case {
  bool ta, tb;
  int64_t M, N, K, pad;  // pad: extra elements at the end of every stored row (leading dimension > row)
  float alpha, beta;
};

// Runs one float32 product through gemm_ld and compares each entry with the float64 product of the same
// (float32) inputs. The bound holds for any summation order and FMA use: |c - ref| <= 2 (K + 2) u (|alpha|
// (|A||B|)_ij + |beta| |C0_ij|), u = 2^-24 (the classic gamma_K bound, doubled).
::testing::AssertionResult matches_float64(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  const int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K, br = c.tb ? c.N : c.K, bc = c.tb ? c.K : c.N;
  const int64_t lda = ac + c.pad, ldb = bc + c.pad, ldc = c.N + c.pad;
  std::vector<float> A(ar * lda), B(br * ldb), C(c.M * ldc);
  for (float& v : A) v = nd(rng);
  for (float& v : B) v = nd(rng);
  for (float& v : C) v = nd(rng);
  const std::vector<float> C0 = C;
  gemm_ld(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
  const double u = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = A[c.ta ? k * lda + i : i * lda + k], b = B[c.tb ? j * ldb + k : k * ldb + j];
        s += a * b;
        mag += std::fabs(a * b);
      }
      const double ref = c.alpha * s + c.beta * C0[i * ldc + j];
      const double tol = 2.0 * (c.K + 2) * u * (std::fabs(c.alpha) * mag + std::fabs(c.beta * C0[i * ldc + j]));
      if (!(std::fabs(C[i * ldc + j] - ref) <= tol))
        return ::testing::AssertionFailure() << "C[" << i << "," << j << "] = " << C[i * ldc + j] << ", float64 "
                                             << ref << ", tolerance " << tol;
    }
  // The padding past each row of C stays untouched.
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = c.N; j < ldc; ++j)
      if (C[i * ldc + j] != C0[i * ldc + j])
        return ::testing::AssertionFailure() << "padding C[" << i << "," << j << "] was written";
  return ::testing::AssertionSuccess();
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      out.push_back({ta, tb, 7, 5, 3, 0, 1.0f, 0.0f});
      out.push_back({ta, tb, 33, 17, 65, 3, 0.5f, 0.25f});
      out.push_back({ta, tb, 64, 96, 200, 5, -1.0f, 1.0f});
    }
  // The model shapes (MLP 784-1024-1024-10 at batch 64; GPT linears at 1024 tokens; attention blocks).
  out.push_back({false, true, 64, 1024, 784, 0, 1.0f, 0.0f});   // linear forward x W^T
  out.push_back({false, false, 64, 784, 1024, 0, 1.0f, 0.0f});  // input gradient g W
  out.push_back({true, false, 1024, 784, 64, 0, 1.0f, 1.0f});   // weight gradient g^T x, accumulated
  out.push_back({false, true, 64, 10, 1024, 0, 1.0f, 0.0f});    // the 10-wide output layer
  out.push_back({false, true, 1024, 384, 128, 0, 1.0f, 0.0f});  // GPT qkv
  out.push_back({false, true, 64, 64, 32, 352, 0.17f, 0.0f});   // q k^T inside the (T, 3C) qkv rows
  return out;
}

void expect_all_match(GemmBackend backend) {
  set_gemm_backend(backend);
  const GemmCounts before = gemm_counts();
  uint64_t seed = 1;
  const std::vector<Case> all = cases();
  for (const Case& c : all)
    EXPECT_TRUE(matches_float64(c, seed++)) << gemm_backend_name(backend) << (c.ta ? " A^T" : " A")
                                            << (c.tb ? " B^T" : " B") << " M " << c.M << " N " << c.N << " K "
                                            << c.K << " pad " << c.pad;
  const GemmCounts after = gemm_counts();
  // Every product ran on the forced library.
  const int64_t n = static_cast<int64_t>(all.size());
  EXPECT_EQ(after.onednn - before.onednn, backend == GemmBackend::OneDNN ? n : 0);
  EXPECT_EQ(after.blis - before.blis, backend == GemmBackend::BLIS ? n : 0);
  EXPECT_EQ(after.openblas - before.openblas, backend == GemmBackend::OpenBLAS ? n : 0);
}
}  // namespace

TEST_F(GemmBackendTest, OpenBlasFloat32MatchesFloat64OnEveryLayout) {
  set_blas_threads(1);
  expect_all_match(GemmBackend::OpenBLAS);
}

TEST_F(GemmBackendTest, OneDnnFloat32MatchesFloat64OnEveryLayout) {
  if (!onednn_available()) GTEST_SKIP() << "this build has no oneDNN (install libdnnl-dev and reconfigure)";
  set_blas_threads(1);
  expect_all_match(GemmBackend::OneDNN);
  set_blas_threads(2);
  expect_all_match(GemmBackend::OneDNN);
}

// BLIS (libblis4, dlopen'ed: gemm_blis.h): the transpose codes and integer width taken from its documentation
// are right if every layout matches the float64 reference.
TEST_F(GemmBackendTest, BlisFloat32MatchesFloat64OnEveryLayout) {
  if (!blis_available()) GTEST_SKIP() << blis_version();
  set_blas_threads(1);
  expect_all_match(GemmBackend::BLIS);
  EXPECT_NE(gemm_libraries().find("BLIS"), std::string::npos) << gemm_libraries();
}

TEST_F(GemmBackendTest, Float64AlwaysRunsOnOpenBlas) {
  if (onednn_available()) set_gemm_backend(GemmBackend::OneDNN);
  const GemmCounts before = gemm_counts();
  std::vector<double> A(64 * 64, 0.5), B(64 * 64, 0.25), C(64 * 64);
  gemm(false, false, 64, 64, 64, 1.0, A.data(), B.data(), 0.0, C.data());
  EXPECT_EQ(C[0], 64 * 0.125);
  EXPECT_EQ(gemm_counts().openblas - before.openblas, 1);
  EXPECT_EQ(gemm_counts().onednn, before.onednn);
}

TEST_F(GemmBackendTest, AutoPicksPerShapeAndThreadBudget) {
  // The rule on each kind of machine (auto_gemm_backend), whatever this one is.
  auto on = [](bool avx512, int64_t M, int64_t N, int64_t K, int threads) {
    return auto_gemm_backend(M, N, K, threads, /*with_onednn=*/true, avx512);
  };
  // AVX-512, one thread: the MLP's products, the GPT's linears and large squares on oneDNN; skinny and tiny
  // ones on OpenBLAS.
  EXPECT_EQ(on(true, 64, 1024, 784, 1), GemmBackend::OneDNN);    // forward x W^T
  EXPECT_EQ(on(true, 64, 1024, 1024, 1), GemmBackend::OneDNN);   // input gradient
  EXPECT_EQ(on(true, 1024, 784, 64, 1), GemmBackend::OneDNN);    // weight gradient
  EXPECT_EQ(on(true, 1024, 128, 128, 1), GemmBackend::OneDNN);   // GPT linears
  EXPECT_EQ(on(true, 1024, 128, 512, 1), GemmBackend::OneDNN);
  EXPECT_EQ(on(true, 512, 128, 1024, 1), GemmBackend::OneDNN);   // their weight gradient
  EXPECT_EQ(on(true, 1024, 1024, 1024, 1), GemmBackend::OneDNN);
  EXPECT_EQ(on(true, 64, 10, 1024, 1), GemmBackend::OpenBLAS);   // output layer
  EXPECT_EQ(on(true, 64, 1024, 10, 1), GemmBackend::OpenBLAS);
  EXPECT_EQ(on(true, 31, 1024, 1024, 1), GemmBackend::OpenBLAS);  // the class's edges
  EXPECT_EQ(on(true, 32, 127, 1024, 1), GemmBackend::OpenBLAS);
  EXPECT_EQ(on(true, 32, 128, 1024, 1), GemmBackend::OneDNN);
  EXPECT_EQ(on(true, 64, 64, 32, 1), GemmBackend::OpenBLAS);     // attention blocks
  EXPECT_EQ(on(true, 64, 32, 64, 1), GemmBackend::OpenBLAS);
  // More threads: OpenBLAS's thread pool for every product (never two pools in one process).
  EXPECT_EQ(on(true, 64, 1024, 784, 2), GemmBackend::OpenBLAS);
  EXPECT_EQ(on(true, 64, 64, 32, 2), GemmBackend::OpenBLAS);
  // AVX2 only: OpenBLAS for every product (its Haswell kernels were the fastest there on the MLP too).
  for (int threads : {1, 2}) {
    EXPECT_EQ(on(false, 64, 1024, 784, threads), GemmBackend::OpenBLAS);
    EXPECT_EQ(on(false, 1024, 784, 64, threads), GemmBackend::OpenBLAS);
    EXPECT_EQ(on(false, 1024, 128, 128, threads), GemmBackend::OpenBLAS);
  }
  // Without oneDNN in the build: OpenBLAS.
  EXPECT_EQ(auto_gemm_backend(64, 1024, 784, 1, false, true), GemmBackend::OpenBLAS);
  // This machine follows the rule with its own key.
  set_gemm_backend(GemmBackend::Auto);
  EXPECT_EQ(gemm_backend_for(64, 1024, 784, 1), auto_gemm_backend(64, 1024, 784, 1, onednn_available(), cpu_has_avx512()));
  if (!onednn_available()) return;
  // A forced setting wins over the rule.
  set_gemm_backend(GemmBackend::OneDNN);
  EXPECT_EQ(gemm_backend_for(64, 64, 32, 2), GemmBackend::OneDNN);
  set_gemm_backend(GemmBackend::OpenBLAS);
  EXPECT_EQ(gemm_backend_for(64, 1024, 784, 1), GemmBackend::OpenBLAS);
}

TEST_F(GemmBackendTest, OneDnnThreadsFollowTheBudgetInEveryCallingThread) {
  if (!onednn_available()) GTEST_SKIP() << "this build has no oneDNN (install libdnnl-dev and reconfigure)";
  set_gemm_backend(GemmBackend::OneDNN);
  std::vector<float> A(128 * 128, 1.0f), B(128 * 128, 1.0f), C(128 * 128);
  auto product = [&] { gemm(false, false, 128, 128, 128, 1.0f, A.data(), B.data(), 0.0f, C.data()); };
  for (int budget : {1, 2, 1}) {
    set_blas_threads(budget);
    product();
    EXPECT_EQ(onednn_threads_of_this_thread(), budget);
    // A thread the runtime did not set up (OpenMP's default there is every core) gets the budget too.
    int seen = -1;
    std::thread([&] {
      product();
      seen = onednn_threads_of_this_thread();
    }).join();
    EXPECT_EQ(seen, budget);
  }
  EXPECT_EQ(C[0], 128.0f);
}

TEST(GemmBackendNames, ParseAndErrors) {
  EXPECT_EQ(parse_gemm_backend("auto", "DDP_GEMM"), GemmBackend::Auto);
  EXPECT_EQ(parse_gemm_backend("openblas", "DDP_GEMM"), GemmBackend::OpenBLAS);
  EXPECT_EQ(parse_gemm_backend("onednn", "DDP_GEMM"), GemmBackend::OneDNN);
  EXPECT_EQ(parse_gemm_backend("blis", "DDP_GEMM"), GemmBackend::BLIS);
  try {
    parse_gemm_backend("mkl", "DDP_GEMM");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("DDP_GEMM='mkl' is not a GEMM backend"), std::string::npos) << msg;
    EXPECT_NE(msg.find("openblas, onednn or blis"), std::string::npos) << msg;
  }
  if (!onednn_available()) {
    try {
      set_gemm_backend(GemmBackend::OneDNN);
      FAIL() << "no error";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("install libdnnl-dev"), std::string::npos) << e.what();
    }
  }
  EXPECT_NE(gemm_libraries().find("OpenBLAS"), std::string::npos);
}

TEST(GemmBackendNames, LeadingDimensionShorterThanTheRowIsAnError) {
  std::vector<float> A(16), B(16), C(16);
  try {
    gemm_ld(false, false, 4, 4, 4, 1.0f, A.data(), 3, B.data(), 4, 0.0f, C.data(), 4);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("leading dimensions"), std::string::npos) << e.what();
  }
}

// DDP_GEMM is read at the first product: a wrong value stops the program there with the variable's name and
// the three choices (bench_e2e is the smallest program that trains).
TEST(GemmBackendNames, WrongDdpGemmValueStopsTheProgramNamingIt) {
  const std::string bench = std::string(DDP_BIN_DIR) + "/bench_e2e";
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << bench << " is not built (DDP_BUILD_BENCH=OFF)";
  ddp::testing::ProcessOptions po;
  po.set_env["DDP_GEMM"] = "blas";
  const auto r = ddp::testing::run_process(
      {bench, "--config", "mlp", "--steps", "1", "--warmup", "1", "--threads", "1", "--device", "cpu"}, po);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE((r.out + r.err).find("DDP_GEMM='blas' is not a GEMM backend: use auto (per shape), openblas, onednn or blis"),
            std::string::npos)
      << r.out << r.err;
}
