// test_step_timing.cpp - the reducer's step measurements on the host clock (the fallback used for CPU
// parameters, exercised here without a GPU): ready <= launched <= completed per bucket, a completion comes
// from the backend's own finish time, communication spans first launch to last completion, exposed
// communication is finalize end - start, and filling twice gives the same numbers.
#include <gtest/gtest.h>

#include <thread>

#include "runtime/ddp/step_timing.h"

using namespace ddp;
using namespace std::chrono;

namespace {
// A Work the test finishes by hand, so that its backend finish time is known.
class ManualWork : public dist::Work {
 public:
  ManualWork() : dist::Work("manual") {}
};
}  // namespace

TEST(StepTiming, HostClockOrdersBucketMarksAndUsesTheBackendsFinishTime) {
  StepTiming t;
  t.begin(Device::cpu(), /*device_clock=*/false, 2);
  EXPECT_FALSE(t.on_device());
  auto w0 = std::make_shared<ManualWork>(), w1 = std::make_shared<ManualWork>();
  t.bucket_ready(0);
  t.bucket_launched(0, w0, std::chrono::steady_clock::now());
  std::this_thread::sleep_for(milliseconds(5));
  t.bucket_ready(1);
  t.bucket_launched(1, w1, std::chrono::steady_clock::now());
  w0->finish();
  std::this_thread::sleep_for(milliseconds(5));
  w1->finish();
  t.finalize_begin();
  std::this_thread::sleep_for(milliseconds(20));  // the reducer "waits" for communication
  t.bucket_completed(0);
  t.bucket_completed(1);
  t.finalize_end();
  t.used_map_sync(0.25);

  IterationStats s;
  s.buckets.resize(2);
  t.fill(s);
  for (const auto& b : s.buckets) {
    EXPECT_LE(b.ready_s, b.launched_s);
    EXPECT_LE(b.launched_s, b.completed_s);
  }
  EXPECT_LT(s.buckets[0].completed_s, s.buckets[1].completed_s);
  EXPECT_LT(s.buckets[1].completed_s, s.backward_compute_s)
      << "completion is the backend's finish, not the wait";
  EXPECT_NEAR(s.communication_s, s.buckets[1].completed_s - s.buckets[0].launched_s, 1e-12);
  EXPECT_GE(s.exposed_communication_s, 0.019);
  EXPECT_EQ(s.used_map_sync_s, 0.25);
  EXPECT_FALSE(s.device_clock);

  IterationStats again;
  again.buckets.resize(2);
  t.fill(again);
  EXPECT_EQ(again.exposed_communication_s, s.exposed_communication_s);
  EXPECT_EQ(again.buckets[1].completed_s, s.buckets[1].completed_s);
}

TEST(StepTiming, CudaDeviceWithoutDeviceClockFallsBackToTheHost) {
  StepTiming t;
  t.begin(Device::cuda(0), /*device_clock=*/false, 1);  // e.g. Gloo staging: no device events
  EXPECT_FALSE(t.on_device());
  t.bucket_ready(0);
  t.bucket_launched(0, nullptr, std::chrono::steady_clock::now());
  t.bucket_completed(0);
  IterationStats s;
  s.buckets.resize(1);
  t.fill(s);
  EXPECT_LE(s.buckets[0].launched_s, s.buckets[0].completed_s);
}

// A fast backend (shm, Gloo on a small bucket) can finish the collective before the reducer records the
// launch: the launch is the time taken before issuing, so it never comes after the backend's finish.
TEST(StepTiming, LaunchIsTheIssueTimeEvenWhenTheBackendFinishedFirst) {
  StepTiming t;
  t.begin(Device::cpu(), /*device_clock=*/false, 1);
  t.bucket_ready(0);
  const auto issued = std::chrono::steady_clock::now();
  auto w = std::make_shared<ManualWork>();
  std::this_thread::sleep_for(milliseconds(2));
  w->finish();  // done before bucket_launched below
  std::this_thread::sleep_for(milliseconds(2));
  t.bucket_launched(0, w, issued);
  t.finalize_begin();
  t.bucket_completed(0);
  t.finalize_end();
  IterationStats s;
  s.buckets.resize(1);
  t.fill(s);
  EXPECT_LE(s.buckets[0].ready_s, s.buckets[0].launched_s);
  EXPECT_LT(s.buckets[0].launched_s, s.buckets[0].completed_s);
}

// Through the reducer on the CPU: the statistics come from StepTiming on the host clock.
#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/local_world.h"
#include "runtime/ops/loss.h"

TEST(StepTiming, ReducerStatisticsOnTheHostClock) {
  dist::run_threads(2, [&](int, dist::ProcessGroup& pg) {
    auto model = std::make_shared<models::MLP>(models::MLPConfig{64, {256, 256}, 10, DType::F32});
    DDPOptions o;
    o.first_bucket_mb = o.bucket_cap_mb = 0.05;
    o.find_unused_parameters = true;
    DistributedDataParallel ddp(
        model, std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg), o);
    for (int it = 0; it < 2; ++it) {
      Tensor x = Tensor::randn({8, 64}, it);
      autograd::backward(
          ops::cross_entropy(ddp.forward(x), Tensor::from_data<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8})));
      const IterationStats& s = ddp.reducer().last_stats();
      EXPECT_FALSE(s.device_clock);
      ASSERT_GE(s.buckets.size(), 2u);
      for (const auto& b : s.buckets) {
        EXPECT_LE(b.ready_s, b.launched_s);
        EXPECT_LE(b.launched_s, b.completed_s);
        EXPECT_LE(b.completed_s, s.backward_compute_s + s.exposed_communication_s + 1e-3) << s.summary();
      }
      EXPECT_GE(s.used_map_sync_s, 0.0);
    }
  });
}
