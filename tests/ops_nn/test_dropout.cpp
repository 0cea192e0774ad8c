// test_dropout.cpp - dropout: the mask is the documented splitmix64 function of (seed, offset + i)
// (recomputed here independently), determinism, keep rate, scaling, offsets and the generator, identity
// cases, gradient = same mask, CUDA gives the identical mask.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/ops/dropout.h"
#include "tests/ops_nn/ops_nn_test_util.h"

using namespace ddp;
using namespace ddp::testing;

namespace {
// The mask as documented in kernels/cpu/dropout.h, written out again without using it.
bool expected_keep(uint64_t seed, uint64_t counter, double p) {
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const uint64_t golden = 0x9E3779B97F4A7C15ull;
  const uint64_t key = mix(seed + golden);
  const double u = static_cast<double>(mix(key + (counter + 1) * golden)) / 18446744073709551616.0;  // [0, 1]
  return u >= p;
}
std::vector<bool> kept(const Tensor& y) {
  std::vector<bool> k;
  for (double v : values(y)) k.push_back(v != 0);
  return k;
}
}  // namespace

TEST(Dropout, MaskIsTheDocumentedHash) {
  Tensor x = Tensor::ones({1000}, DType::F64);
  for (double p : {0.1, 0.5, 0.9}) {
    std::vector<double> y = values(ops::dropout(x, p, true, 42, 7));
    for (int i = 0; i < 1000; ++i) {
      const bool keep = expected_keep(42, 7 + i, p);
      EXPECT_EQ(y[i], keep ? 1.0 / (1.0 - p) : 0.0) << "element " << i << " p " << p;
    }
  }
}

TEST(Dropout, SameSeedSameMaskOtherSeedOtherMask) {
  Tensor x = random_f64({64, 33}, 1, false);
  Tensor a = ops::dropout(x, 0.3, true, 123), b = ops::dropout(x, 0.3, true, 123),
         c = ops::dropout(x, 0.3, true, 124);
  EXPECT_TRUE(all_close(a, b, 0));
  EXPECT_NE(kept(a), kept(c));
}

TEST(Dropout, KeepRateAndScale) {
  const int64_t n = 200000;
  Tensor x = Tensor::full({n}, 2.0, DType::F32);
  for (double p : {0.1, 0.5, 0.8}) {
    std::vector<double> y = values(ops::dropout(x, p, true, 9));
    int64_t k = 0;
    for (double v : y) {
      if (v != 0) {
        ++k;
        EXPECT_FLOAT_EQ(v, 2.0 / (1.0 - p));
      }
    }
    const double sigma = std::sqrt(n * p * (1 - p));  // binomial standard deviation
    EXPECT_NEAR(static_cast<double>(k), n * (1 - p), 6 * sigma) << "p " << p;
  }
}

TEST(Dropout, OffsetShiftsTheCounterStream) {
  Tensor x = Tensor::ones({100}, DType::F64);
  std::vector<bool> whole = kept(ops::dropout(x, 0.5, true, 5, 0));
  std::vector<bool> tail = kept(ops::dropout(x.slice0(40, 100), 0.5, true, 5, 40));
  EXPECT_EQ(tail, std::vector<bool>(whole.begin() + 40, whole.end()));
}

TEST(Dropout, GeneratorGivesFreshReproducibleMasks) {
  Tensor x = Tensor::ones({50}, DType::F64);
  ops::DropoutGenerator g{77, 0};
  Tensor a = ops::dropout(x, 0.5, true, g);
  EXPECT_EQ(g.offset, 50u);
  Tensor b = ops::dropout(x, 0.5, true, g);
  EXPECT_EQ(g.offset, 100u);
  EXPECT_NE(kept(a), kept(b));
  ops::dropout(x, 0.5, false, g);  // eval mode uses no counters
  EXPECT_EQ(g.offset, 100u);
  ops::DropoutGenerator replay{77, 50};
  EXPECT_TRUE(all_close(ops::dropout(x, 0.5, true, replay), b, 0));
}

TEST(Dropout, IdentityAndEdgeCases) {
  Tensor x = random_f64({4, 5}, 1);
  EXPECT_TRUE(ops::dropout(x, 0.5, false, 1).same(x));
  EXPECT_TRUE(ops::dropout(x, 0.0, true, 1).same(x));
  for (double v : values(ops::dropout(x, 1.0, true, 1))) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(ops::dropout(x, -0.1, true, 1), Error);
  EXPECT_THROW(ops::dropout(x, 1.5, true, 1), Error);
}

TEST(Dropout, GradientUsesTheSameMask) {
  Tensor x = random_f64({7, 9}, 3);
  Tensor y = ops::dropout(x, 0.4, true, 11, 3);
  Tensor g = random_f64({7, 9}, 4, false);
  autograd::backward({y}, {g});
  std::vector<double> xv = values(x), yv = values(y), gv = values(g), dx = values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(dx[i], yv[i] != 0 ? gv[i] / 0.6 : 0.0, 1e-15);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::dropout(in[0], 0.25, true, 8); },
                        {random_f64({3, 1, 5}, 5)}));
}

TEST(Dropout, CudaMaskIsIdentical) {
  DDP_SKIP_WITHOUT_GPU();
  Tensor x = random_f64({37, 129}, 1);
  for (double p : {0.1, 0.5}) {
    Tensor cpu = ops::dropout(x.to(DType::F32), p, true, 99, 12345);
    Tensor gpu = ops::dropout(x.to(DType::F32).to(Device::cuda(0)), p, true, 99, 12345).to(Device::cpu());
    EXPECT_EQ(kept(gpu), kept(cpu));
    EXPECT_TRUE(all_close(gpu, cpu, 0, 1e-6));
  }
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return ops::dropout(in[0], 0.3, true, 5); },
                          {x}, 0, 1e-6);
}
