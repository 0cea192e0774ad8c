// test_deterministic_reduction.cpp - DeterministicReduction (runtime/ddp/deterministic_reduction.h) over
// worlds 1-4, shm / gloo / hier and every way of dealing a step's micro-batches to the ranks (round-robin,
// contiguous, uneven, a rank with none, as Join leaves it): the gradients and buffers it writes are bitwise
// those of one process holding every micro-batch, within float32's rounding of the float64 mean, and a
// parameter no micro-batch touched keeps .grad none on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>

#include "runtime/ddp/deterministic_reduction.h"
#include "runtime/distributed/local_world.h"

using namespace ddp;

namespace {

constexpr int kMicroBatches = 5;  // a prime: no world of 2-4 divides it
const std::vector<int64_t> kSizes = {0, 1, 255, 256, 257, 1031};  // around the 256-element exponent block

// The gradient micro-batch m gives parameter k (parameter 3 never gets one).
Tensor gradient(int m, size_t k, DType dtype) {
  std::mt19937_64 rng(1000 * static_cast<uint64_t>(m) + k);
  std::normal_distribution<double> nd;
  std::uniform_int_distribution<int> ex(-12, 3);
  std::vector<double> v(static_cast<size_t>(kSizes[k]));
  for (auto& x : v) x = std::ldexp(nd(rng), ex(rng));
  Tensor t = Tensor::from_data<double>(v, {kSizes[k]});
  return t.to(dtype);
}
// The buffer's value after micro-batch m.
Tensor buffer_after(int m) { return Tensor::from_data<float>({0.25f * static_cast<float>(m) - 0.3f, 1e-6f * m}, {2}); }

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

struct Outcome {
  std::vector<Tensor> grads;  // per parameter (undefined: none)
  Tensor buffer;
};

// One step where rank r holds the micro-batches deal(r), each rank its own copy of the parameters.
Outcome run_step(dist::ProcessGroup& pg, const std::vector<int>& mine, DType dtype) {
  std::vector<Tensor> params;
  for (int64_t n : kSizes) params.push_back(Tensor::zeros({n}, dtype));
  params.push_back(Tensor::zeros({3}, dtype));  // parameter 3... the last one: never a gradient
  Tensor buffer = Tensor::from_data<float>({1.f, 2.f}, {2});
  DeterministicReduction red(params, {buffer}, borrow(pg), {.micro_batches = kMicroBatches, .block = 256});
  for (int m : mine) {
    red.before_micro_batch();
    EXPECT_EQ(buffer.data<float>()[0], 1.f);  // back to the step's start before each micro-batch
    for (size_t k = 0; k < kSizes.size(); ++k) params[k].set_grad(gradient(m, k, dtype));
    buffer.copy_from(buffer_after(m));
    red.end_micro_batch();
    for (size_t k = 0; k < kSizes.size(); ++k) EXPECT_FALSE(params[k].grad().defined());  // moved, not copied
  }
  EXPECT_EQ(red.finish_step(), kMicroBatches);
  Outcome o;
  for (auto& p : params) o.grads.push_back(p.grad());
  o.buffer = buffer;
  return o;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// The deals of the step's micro-batches to `world` ranks.
std::vector<std::vector<std::vector<int>>> deals(int world) {
  std::vector<std::vector<std::vector<int>>> d;
  std::vector<std::vector<int>> robin(world), contiguous(world), one_has_all(world), reversed(world);
  for (int m = 0; m < kMicroBatches; ++m) {
    robin[m % world].push_back(m);
    contiguous[std::min(world - 1, m * world / kMicroBatches)].push_back(m);
    one_has_all[world - 1].push_back(m);  // the others have none (out of data)
    reversed[m % world].insert(reversed[m % world].begin(), kMicroBatches - 1 - m);
  }
  d = {robin, contiguous, one_has_all, reversed};
  return d;
}

}  // namespace

TEST(DeterministicReduction, AnyWorldBackendAndDealGivesTheBitsOfOneProcess) {
  for (DType dtype : {DType::F32, DType::F64}) {
    Outcome reference;
    dist::run_threads(1, [&](int, dist::ProcessGroup& pg) { reference = run_step(pg, {0, 1, 2, 3, 4}, dtype); });
    // Close to the float64 mean; parameter 3 (no gradient) stays none; the buffer is the mean of its values.
    for (size_t k = 0; k < kSizes.size(); ++k) {
      ASSERT_TRUE(reference.grads[k].defined());
      const auto got = reference.grads[k].to_double_vector();
      for (int64_t i = 0; i < kSizes[k]; ++i) {
        long double sum = 0;  // of the values the micro-batches gave (in the parameter's dtype)
        for (int m = 0; m < kMicroBatches; ++m) sum += gradient(m, k, dtype).to_double_vector()[size_t(i)];
        const double exact = static_cast<double>(sum / kMicroBatches);
        const double eps = dtype == DType::F32 ? 1.2e-7 : 2.3e-16;
        ASSERT_NEAR(got[static_cast<size_t>(i)], exact, 2 * std::fabs(exact) * eps + 1e-15) << k << " " << i;
      }
    }
    EXPECT_FALSE(reference.grads.back().defined());
    EXPECT_FLOAT_EQ(reference.buffer.data<float>()[0], (0.25f * 10 - 1.5f) / 5);

    for (const char* backend : {"shm", "gloo", "hier"})
      for (int world = 2; world <= 4; ++world)
        for (const auto& deal : deals(world)) {
          SCOPED_TRACE(std::string(backend) + " world " + std::to_string(world) + " " + std::string(dtype_name(dtype)));
          std::vector<Outcome> out(static_cast<size_t>(world));
          dist::run_threads(
              world,
              [&](int rank, dist::ProcessGroup& pg) {
                out[static_cast<size_t>(rank)] = run_step(pg, deal[static_cast<size_t>(rank)], dtype);
              },
              dist::ProcessGroupOptions{}, backend);
          for (int r = 0; r < world; ++r)
            for (size_t k = 0; k < reference.grads.size(); ++k) {
              ASSERT_TRUE(same_bits(out[size_t(r)].grads[k], reference.grads[k])) << "rank " << r << " parameter " << k;
              ASSERT_TRUE(same_bits(out[size_t(r)].buffer, reference.buffer)) << "rank " << r;
            }
        }
  }
}

// More micro-batches on a rank than the step has: a named error, not a silent overflow of the headroom.
TEST(DeterministicReduction, MoreMicroBatchesThanTheStepHasIsNamed) {
  dist::run_threads(1, [&](int, dist::ProcessGroup& pg) {
    Tensor p = Tensor::zeros({4});
    DeterministicReduction red({p}, {}, borrow(pg), {.micro_batches = 1});
    red.end_micro_batch();
    try {
      red.end_micro_batch();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("micro_batches"), std::string::npos) << e.what();
    }
  });
}
