// test_gpu_device_checks.cpp - the GPT path on a GPU with no host round trip (issue 38): a bad token (wte), a
// bad position (wpe) and a bad label each surface at the next check with the op's message, after a forward
// and backward that did not stop for them, and the process goes on; a clean forward makes no device-to-host
// copy at all; positions are made on the device. The bookkeeping itself is tested on the CPU
// (tests/ops_nn/test_device_checks.cpp); the kernels' handling of a bad index under compute-sanitizer:
// Embedding.Cuda* and CrossEntropy.Cuda* in tests/ops_nn. Skips with "skipped: no GPU" without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "runtime/autograd/engine.h"
#include "runtime/core/device.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/loss.h"
#include "runtime/tensor/device_checks.h"
#include "runtime/tensor/storage.h"
#include "tests/support/collective_checks.h"

using namespace ddp;
using ddp::testing::error_of;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU"

constexpr int64_t kVocab = 16, kContext = 8, kBatch = 2;

std::shared_ptr<models::GPT> tiny_gpt() {
  nn::manual_seed(5);
  models::GPTConfig c;
  c.vocab = kVocab;
  c.context = kContext;
  c.d_model = 32;
  c.n_head = 2;
  c.n_layer = 1;
  auto m = std::make_shared<models::GPT>(c);
  (void)m->named_parameters();  // names the parameters ("wte.weight", ...), as DDP and the optimizers do
  m->to(Device::cuda(0));
  return m;
}

Tensor tokens_with(int64_t position, int64_t value) {
  std::vector<int64_t> v(kBatch * kContext);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 5 + 1) % kVocab);
  if (position >= 0) v[static_cast<size_t>(position)] = value;
  return Tensor::from_data<int64_t>(v, {kBatch, kContext}).to(Device::cuda(0));
}

Tensor named(const nn::Module& m, const std::string& name) {
  for (auto& p : m.named_parameters())
    if (p.name == name) return p.tensor;
  ADD_FAILURE() << "no parameter " << name;
  return Tensor();
}

// One GPT training micro-step without any host read: forward, loss, backward.
Tensor forward_backward(models::GPT& gpt, const Tensor& tokens, const Tensor& labels) {
  Tensor loss = ops::cross_entropy(gpt.forward(tokens), labels);
  autograd::backward(loss);
  return loss;
}


// A clean step afterwards: no error, nothing pending, a finite loss.
void expect_clean_step(models::GPT& gpt) {
  gpt.zero_grad();
  Tensor loss = forward_backward(gpt, tokens_with(-1, 0), tokens_with(-1, 0));
  double value = 0;
  EXPECT_EQ(error_of([&] { value = loss.item(); }), "");
  EXPECT_TRUE(std::isfinite(value));
  EXPECT_EQ(pending_device_checks(), 0);
}

}  // namespace

TEST(GpuDeviceChecks, BadTokenSurfacesAtTheCheckWithTheWteMessageAndTheProcessGoesOn) {
  SKIP_WITHOUT_GPU();
  auto gpt = tiny_gpt();
  set_device_check_step(4);
  Tensor loss;
  EXPECT_EQ(error_of([&] { loss = forward_backward(*gpt, tokens_with(5, kVocab + 3), tokens_with(-1, 0)); }),
            "")
      << "the op waited for the device";
  const std::string e = error_of([] { check_device_errors(); });
  for (const char* part : {"embedding: index 19 at position 5", "indices of shape (2, 8)", "outside [0, 16)",
                           "the table 'wte.weight' of 16 rows", "found on cuda:0", "training step 4"})
    EXPECT_NE(e.find(part), std::string::npos) << part << "\n" << e;
  // The bad row's gradient went to no row: every wte gradient is finite (nothing read past the table).
  for (double g : named(*gpt, "wte.weight").grad().to_double_vector()) ASSERT_TRUE(std::isfinite(g));
  set_device_check_step(5);
  expect_clean_step(*gpt);
  set_device_check_step(0);
}

TEST(GpuDeviceChecks, BadPositionSurfacesWithTheWpeMessage) {
  SKIP_WITHOUT_GPU();
  auto gpt = tiny_gpt();
  // GPT itself refuses T > context on the host; a position table read past its rows directly:
  Tensor wpe = named(*gpt, "wpe.weight");
  Tensor out = ops::embedding(wpe, Tensor::arange(kContext + 2, DType::I64, Device::cuda(0)));
  const std::string e = error_of([] { check_device_errors(); });
  EXPECT_NE(e.find("embedding: index 8 at position 8"), std::string::npos) << e;
  EXPECT_NE(e.find("the table 'wpe.weight' of 8 rows"), std::string::npos) << e;
  EXPECT_EQ(e.find("more device-side check"), std::string::npos)
      << e;  // 8 and 9 are bad: one check, one error
  // The rows past the table are zeros, the others the table's rows.
  const std::vector<double> rows = out.to_double_vector(), table = wpe.to_double_vector();
  const size_t cols = static_cast<size_t>(wpe.size(1));
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(rows[i], i < table.size() ? table[i] : 0.0) << "element " << i << " (row " << i / cols << ")";
  expect_clean_step(*gpt);
}

TEST(GpuDeviceChecks, BadLabelSurfacesAtTheLossReadWithTheCrossEntropyMessage) {
  SKIP_WITHOUT_GPU();
  auto gpt = tiny_gpt();
  set_device_check_step(2);
  Tensor loss = forward_backward(*gpt, tokens_with(-1, 0), tokens_with(3, 99));
  const std::string e = error_of([&] { (void)loss.item(); });  // Tensor::item raises the pending checks
  for (const char* part : {"cross_entropy: target 99 at position 3", "targets of shape (2, 8)",
                           "outside [0, 16)", "fix the labels", "training step 2"})
    EXPECT_NE(e.find(part), std::string::npos) << part << "\n" << e;
  set_device_check_step(0);
  expect_clean_step(*gpt);
}

TEST(GpuDeviceChecks, ACleanGptForwardMakesNoDeviceToHostCopy) {
  SKIP_WITHOUT_GPU();
  auto gpt = tiny_gpt();
  Tensor tokens = tokens_with(-1, 0), labels = tokens_with(-1, 0);
  (void)ops::cross_entropy(gpt->forward(tokens), labels).item();  // warm-up (allocations, handles)
  const int64_t before = detail::device_to_host_copies();
  Tensor loss = ops::cross_entropy(gpt->forward(tokens), labels);
  EXPECT_EQ(detail::device_to_host_copies() - before, 0) << "the forward read device memory on the host";
  autograd::backward(loss);
  std::printf("device-to-host copies in the backward: %lld\n",
              static_cast<long long>(detail::device_to_host_copies() - before));
  EXPECT_EQ(pending_device_checks(), 3);  // wte, wpe, labels
  (void)loss.item();                      // the one read: the loss, then the checks' slots
  EXPECT_EQ(pending_device_checks(), 0);
}

TEST(GpuDeviceChecks, ArangeIsMadeOnTheDevice) {
  SKIP_WITHOUT_GPU();
  for (DType d : {DType::I64, DType::I32, DType::F32, DType::F64}) {
    const int64_t before = detail::device_to_host_copies();
    Tensor t = Tensor::arange(70000, d, Device::cuda(0));
    EXPECT_EQ(detail::device_to_host_copies(), before);
    EXPECT_EQ(t.device(), Device::cuda(0));
    EXPECT_TRUE(t.to_double_vector() == Tensor::arange(70000, d).to_double_vector()) << dtype_name(d);
  }
}
