// test_device_checks.cpp - the device-side index checks (runtime/tensor/device_checks.h) on the CPU: the
// per-slot bookkeeping runs on a CPU stand-in buffer, and "kernels" that report the way the CUDA ones do
// (every bad position min'ed into the slot in a scrambled thread order, kernels/cpu/index_check.h). Also the
// index tests the CUDA kernels share with the CPU, and the ops' messages. The same path on a GPU, through the
// real ops: tests/gpu/test_gpu_device_checks.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/index_check.h"
#include "kernels/cpu/loss.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/index_errors.h"
#include "runtime/ops/loss.h"
#include "runtime/tensor/device_checks.h"
#include "runtime/tensor/storage.h"
#include "tests/support/collective_checks.h"

using namespace ddp;
using ddp::testing::error_of;
namespace ic = ddp::kernels::cpu;

namespace {

// What first_bad_index_kernel does, one "thread" per element in a scrambled order: slot = min(slot, i) for
// every i whose value is outside [0, bound).
void report_like_a_kernel(unsigned long long* slot, const Tensor& values, int64_t bound, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(values.numel()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  const int64_t* v = values.data<int64_t>();
  for (int64_t i : order)
    if (!ic::index_in_range(v[i], bound))
      *slot = ic::keep_first_bad(*slot, static_cast<unsigned long long>(i));
}

// A check as embedding reserves it on a GPU, on the CPU stand-in buffer.
unsigned long long* reserve_embedding(const Tensor& indices, int64_t rows, const std::string& table) {
  return reserve_device_check({indices, [shape = indices.shape(), rows, table](int64_t value, int64_t pos) {
                                 return ops::embedding_index_error(shape, rows, table, value, pos);
                               }});
}
unsigned long long* reserve_targets(const Tensor& targets, int64_t classes) {
  return reserve_device_check({targets, [shape = targets.shape(), classes](int64_t value, int64_t pos) {
                                 return ops::cross_entropy_target_error(shape, classes, std::nullopt, value,
                                                                        pos);
                               }});
}

// One "step" of a tiny GPT on the stand-in: wte (vocab 10), wpe (context 4), the labels (10 classes).
void gpt_like_step(const Tensor& tokens, const Tensor& positions, const Tensor& labels) {
  report_like_a_kernel(reserve_embedding(tokens, 10, "wte.weight"), tokens, 10, 1);
  report_like_a_kernel(reserve_embedding(positions, 4, "wpe.weight"), positions, 4, 2);
  report_like_a_kernel(reserve_targets(labels, 10), labels, 10, 3);
}


// Each test starts and ends with nothing pending on its thread.
class DeviceChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)error_of([] { check_device_errors(); });
    set_device_check_step(0);
  }
  void TearDown() override {
    EXPECT_EQ(pending_device_checks(), 0);
    set_device_check_step(0);
  }
};

Tensor ids(std::vector<int64_t> v, Shape s) { return Tensor::from_data<int64_t>(v, s); }

}  // namespace

TEST(IndexCheck, RangeTargetsAndFirstPositionAsTheKernelsSeeThem) {
  EXPECT_TRUE(ic::index_in_range(0, 3));
  EXPECT_TRUE(ic::index_in_range(2, 3));
  EXPECT_FALSE(ic::index_in_range(3, 3));
  EXPECT_FALSE(ic::index_in_range(-1, 3));
  EXPECT_FALSE(ic::index_in_range(0, 0));
  EXPECT_TRUE(ic::target_is_bad(7, 5, false, 0));
  EXPECT_FALSE(ic::target_is_bad(-100, 5, true, -100));  // the ignore index is no error
  EXPECT_TRUE(ic::target_is_bad(-100, 5, true, -1));
  EXPECT_FALSE(ic::target_is_bad(4, 5, true, -100));
  // The slot keeps the smallest position whatever the order threads report in.
  unsigned long long slot = ic::kNoBadPosition;
  for (unsigned long long p : {9ull, 4ull, 12ull, 4ull, 7ull}) slot = ic::keep_first_bad(slot, p);
  EXPECT_EQ(slot, 4ull);
  EXPECT_EQ(ic::keep_first_bad(ic::kNoBadPosition, 0), 0ull);
}

TEST(IndexCheck, BadIndicesSortPastEveryRowInTheBackward) {
  EXPECT_EQ(ic::embedding_sort_key(3, 10), 3u);
  EXPECT_EQ(ic::embedding_sort_key(10, 10), 10u);  // one past the last row: summed into no row
  EXPECT_EQ(ic::embedding_sort_key(-5, 10), 10u);
  EXPECT_EQ(ic::embedding_sort_key(int64_t(1) << 40, 10), 10u);
  // The radix sort's bits hold 0..vocab (the bad key included).
  for (int64_t vocab : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(255), int64_t(256),
                        int64_t(50257), (int64_t(1) << 31), (int64_t(1) << 32) - 1}) {
    const int bits = ic::embedding_sort_bits(vocab);
    EXPECT_GE(bits, 1);
    EXPECT_LE(bits, 32);
    EXPECT_LT(vocab, int64_t(1) << bits) << vocab;  // the key vocab fits
    if (bits > 1) {
      EXPECT_GE(vocab, int64_t(1) << (bits - 1)) << vocab;  // and no bit more than needed
    }
  }
}

TEST(IndexCheck, CpuScansFindTheFirstBadPositionLikeTheSlots) {
  const std::vector<int64_t> v = {1, 2, 11, 3, -1, 10};
  EXPECT_EQ(ic::first_bad_index(v.data(), 6, 10), 2);
  EXPECT_EQ(ic::first_bad_target(v.data(), 6, 10, true, 11), 4);
  unsigned long long slot = ic::kNoBadPosition;
  report_like_a_kernel(&slot, ids(v, {6}), 10, 5);
  EXPECT_EQ(slot, 2ull);
}

TEST_F(DeviceChecks, NothingPendingIsAQuietCheck) {
  check_device_errors();
  gpt_like_step(ids({1, 2, 3, 4}, {1, 4}), Tensor::arange(4), ids({2, 3, 4, 5}, {1, 4}));
  EXPECT_EQ(pending_device_checks(), 3);
  check_device_errors();
  EXPECT_EQ(pending_device_checks(), 0);
}

TEST_F(DeviceChecks, TheMessageNamesOpTableTensorPositionValueStepAndFix) {
  set_device_check_step(7);
  Tensor tokens = ids({1, 2, 3, 4, 5, 12, 6, 13}, {2, 4});
  report_like_a_kernel(reserve_embedding(tokens, 10, "wte.weight"), tokens, 10, 9);
  const std::string e = error_of([] { check_device_errors(); });
  for (const char* part : {"embedding: index 12 at position 5", "indices of shape (2, 4)", "outside [0, 10)",
                           "the table 'wte.weight' of 10 rows", "fix the token ids or enlarge the vocabulary",
                           "found on cpu by a device-side check in training step 7", "check_device_errors"})
    EXPECT_NE(e.find(part), std::string::npos) << part << "\n" << e;
  EXPECT_EQ(e.find("more device-side check"), std::string::npos) << e;
  // The same text the CPU op raises at once (the device adds only where and when).
  Tensor table = Tensor::zeros({10, 3});
  table.set_name("wte.weight");
  const std::string at_once = error_of([&] { ops::embedding(table, tokens); });
  const std::string op_text = ops::embedding_index_error({2, 4}, 10, "wte.weight", 12, 5);
  EXPECT_NE(at_once.find(op_text), std::string::npos) << at_once;
  EXPECT_NE(e.find(op_text), std::string::npos) << e;
}

TEST_F(DeviceChecks, FirstErrorWinsAcrossSlotsAndWithinASlot) {
  set_device_check_step(3);
  // wte clean; wpe bad at positions 4 and 5; labels bad at 1: the earliest check in program order (wpe) is
  // raised, the smallest position in it (4), and the labels' error is counted.
  gpt_like_step(ids({1, 2, 3, 4, 5, 6}, {1, 6}), ids({0, 1, 2, 3, 4, 5}, {6}),
                ids({1, 10, 2, 3, 4, 5}, {1, 6}));
  const std::string e = error_of([] { check_device_errors(); });
  EXPECT_NE(e.find("embedding: index 4 at position 4"), std::string::npos) << e;
  EXPECT_NE(e.find("the table 'wpe.weight' of 4 rows"), std::string::npos) << e;
  EXPECT_NE(e.find("training step 3"), std::string::npos) << e;
  EXPECT_NE(e.find("1 more device-side check failed since the last check"), std::string::npos) << e;
  EXPECT_EQ(pending_device_checks(), 0);
  check_device_errors();  // cleared: the labels' error is not raised a second time
}

TEST_F(DeviceChecks, EverySlotOfAStepCanReportWteWpeAndLabels) {
  set_device_check_step(1);
  gpt_like_step(ids({10, 2}, {1, 2}), ids({0, 9}, {2}), ids({1, -3}, {1, 2}));
  const std::string e = error_of([] { check_device_errors(); });
  EXPECT_NE(e.find("embedding: index 10 at position 0"), std::string::npos) << e;
  EXPECT_NE(e.find("'wte.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("2 more device-side checks failed"), std::string::npos) << e;
  // Only the labels bad: the cross-entropy message.
  gpt_like_step(ids({1, 2}, {1, 2}), ids({0, 1}, {2}), ids({1, -3}, {1, 2}));
  const std::string labels = error_of([] { check_device_errors(); });
  EXPECT_NE(labels.find("cross_entropy: target -3 at position 1 (flat index into targets of shape (1, 2))"),
            std::string::npos)
      << labels;
  EXPECT_NE(labels.find("fix the labels or the number of classes"), std::string::npos) << labels;
}

TEST_F(DeviceChecks, AProgramCatchesTheErrorAndItsNextStepIsClean) {
  Tensor good = ids({1, 2, 3, 4}, {1, 4}), bad = ids({1, 2, 99, 4}, {1, 4}), pos = Tensor::arange(4);
  int raised = 0;
  for (int64_t step = 1; step <= 5; ++step) {
    set_device_check_step(step);
    gpt_like_step(step == 3 ? bad : good, pos, good);
    try {
      check_device_errors();  // as the training loop does once per step
    } catch (const Error& e) {
      ++raised;
      EXPECT_EQ(step, 3);
      EXPECT_NE(std::string(e.what()).find("index 99 at position 2"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("training step 3"), std::string::npos) << e.what();
    }
    EXPECT_EQ(pending_device_checks(), 0) << "step " << step;  // no record outlives its step's check
  }
  EXPECT_EQ(raised, 1);
}

TEST_F(DeviceChecks, RecordsKeepTheCheckedTensorUntilTheCheckThenLetItGo) {
  std::weak_ptr<TensorImpl> watched;
  {
    Tensor tokens = ids({1, 2, 30}, {3});
    watched = tokens.impl_ptr();
    report_like_a_kernel(reserve_embedding(tokens, 10, ""), tokens, 10, 4);
  }
  EXPECT_FALSE(watched.expired());  // the record reads the bad value from it at check time
  const std::string e = error_of([] { check_device_errors(); });
  EXPECT_NE(e.find("index 30 at position 2"), std::string::npos) << e;
  EXPECT_NE(e.find("for a table of 10 rows"), std::string::npos) << e;  // an unnamed table
  EXPECT_NE(e.find("found on cpu by a device-side check, raised"), std::string::npos) << e;  // no step set
  EXPECT_TRUE(watched.expired());
}

TEST_F(DeviceChecks, AFullBufferIsCheckedAtTheNextReservationSoMemoryStaysBounded) {
  Tensor good = ids({1, 2}, {2}), bad = ids({1, 12}, {2});
  report_like_a_kernel(reserve_embedding(bad, 10, "wte.weight"), bad, 10, 1);
  for (int64_t i = 1; i < kSlotsPerDevice; ++i)
    report_like_a_kernel(reserve_embedding(good, 10, "wte.weight"), good, 10, 1);
  EXPECT_EQ(pending_device_checks(), kSlotsPerDevice);
  const std::string e = error_of([&] { (void)reserve_embedding(good, 10, "wte.weight"); });
  EXPECT_NE(e.find("index 12 at position 1"), std::string::npos) << e;
  EXPECT_EQ(pending_device_checks(), 0);
  // Slots are reused from the start, each reset to "no error".
  unsigned long long* slot = reserve_embedding(good, 10, "wte.weight");
  EXPECT_EQ(*slot, ic::kNoBadPosition);
  check_device_errors();
}

TEST_F(DeviceChecks, ThreadsKeepTheirOwnRecords) {
  Tensor bad = ids({1, 12}, {2});
  report_like_a_kernel(reserve_embedding(bad, 10, "wte.weight"), bad, 10, 1);
  std::string other;
  std::thread([&] {
    set_device_check_step(5);
    other = error_of([] { check_device_errors(); });  // nothing of the main thread's
    EXPECT_EQ(pending_device_checks(), 0);
  }).join();
  EXPECT_EQ(other, "");
  EXPECT_EQ(device_check_step(), 0);  // the other thread's step label is its own
  EXPECT_NE(error_of([] { check_device_errors(); }), "");
}

TEST_F(DeviceChecks, CpuOpsStillRaiseAtOnceAndReserveNothing) {
  Tensor w = Tensor::zeros({10, 2});
  EXPECT_NE(error_of([&] {
              ops::embedding(w, ids({3, 10}, {2}));
            }).find("index 10 at position 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ops::cross_entropy(Tensor::zeros({2, 4}), ids({0, 4}, {2}));
            }).find("cross_entropy: target 4 at position 1"),
            std::string::npos);
  EXPECT_EQ(pending_device_checks(), 0);
}

TEST(DeviceToHostCopies, CountedOnlyForCopiesOutOfAGpu) {
  const int64_t before = detail::device_to_host_copies();
  Tensor t = Tensor::arange(16, DType::F32);
  (void)t.to(Device::cpu());
  (void)t.clone();
  (void)t.to(DType::F64);
  (void)t.slice0(3, 4).item();
  EXPECT_EQ(detail::device_to_host_copies(), before);  // host memory only: nothing to count
}

TEST(Arange, OnTheCpuForEveryDtype) {
  for (DType d : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    Tensor t = Tensor::arange(5, d, Device::cpu());
    EXPECT_EQ(t.dtype(), d);
    EXPECT_EQ(t.to_double_vector(), (std::vector<double>{0, 1, 2, 3, 4}));
  }
  EXPECT_EQ(Tensor::arange(0).numel(), 0);
  EXPECT_THROW(Tensor::arange(-1), Error);
}
