// test_gpu_flight_recorder.cpp - the NCCL group's flight record (world 1; NCCL refuses two ranks on one GPU):
// every collective issued, started and completed as the watchdog sees its CUDA events, with the GPU's own
// duration, the bucket details of a tagged issuer, and the record written on exit when a dump directory is set.
// Skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/core/device.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "tests/gpu/nccl_world_one.h"
#include "runtime/tensor/tensor.h"

using namespace ddp;
using namespace ddp::dist;

TEST(GpuFlightRecorder, NcclRecordsEveryCollectiveWithItsDeviceDuration) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ddp_gpu_flight_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  run_threads(1, [&](int, ProcessGroup&, Store& store) {
    setenv("DDP_FLIGHT_RECORDER_DIR", dir.c_str(), 1);  // read when the group is made: only the NCCL group's
    auto nccl = ddp::testing::nccl_world_one(store, "nccl-flight");
    unsetenv("DDP_FLIGHT_RECORDER_DIR");
    Tensor x = Tensor::ones({1 << 20}).to(Device::cuda(0));
    CommBuffer b{x.raw_data(), x.numel(), x.dtype(), x.device(), x.storage()};
    {
      FlightIssuer who("ddp bucket", 2, x.nbytes(), "fc1.weight .. fc2.bias");
      nccl->allreduce(b)->wait();
    }
    nccl->broadcast(b, 0)->wait();
    nccl->barrier()->wait();
    // The watchdog marks completions every 50 ms: wait (bounded) until all three are completed.
    const FlightRecorder* fr = nccl->flight_recorder();
    ASSERT_NE(fr, nullptr);
    for (int i = 0; i < 200; ++i) {
      auto es = fr->entries();
      if (es.size() == 3 && es.back().state == FlightState::Completed) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto es = fr->entries();
    ASSERT_EQ(es.size(), 3u);
    for (const FlightEntry& e : es) {
      EXPECT_EQ(e.state, FlightState::Completed);
      EXPECT_GT(e.started_ns, 0);
      EXPECT_GE(e.ended_ns, e.started_ns);
      EXPECT_GE(e.device_ns, 0);  // CUDA events' elapsed time
    }
    EXPECT_EQ(es[0].kind, CollectiveKind::Allreduce);
    EXPECT_EQ(es[0].bucket, 2);
    EXPECT_EQ(std::string(es[0].params), "fc1.weight .. fc2.bias");
    EXPECT_EQ(es[1].kind, CollectiveKind::Broadcast);
    EXPECT_EQ(es[2].kind, CollectiveKind::Barrier);
  }, ProcessGroupOptions{});
  // Destroyed: the exit record of the NCCL group (rank 0 of its group).
  std::ifstream f(dir / "flight.rank0.json");
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  auto doc = nlohmann::json::parse(ss.str());
  EXPECT_EQ(doc["backend"], "nccl");
  EXPECT_EQ(doc["reason"], "exit");
  EXPECT_TRUE(doc["entries"][0]["device_duration_ns"].is_number());
  fs::remove_all(dir);
}

// Reduce-scatter and all-gather (the sharded reducer's collectives) are recorded like the all-reduce: issued,
// started and completed with their GPU duration, kind, op and count (the whole buffer: world x chunk).
TEST(GpuFlightRecorder, NcclRecordsReduceScatterAndAllgather) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  run_threads(
      1,
      [&](int, ProcessGroup&, Store& store) {
        auto nccl = ddp::testing::nccl_world_one(store, "nccl-flight-rs-ag");
        Tensor whole = Tensor::ones({4099}).to(Device::cuda(0));
        Tensor mine = Tensor::zeros({4099}).to(Device::cuda(0));
        CommBuffer w{whole.raw_data(), whole.numel(), whole.dtype(), whole.device(), whole.storage()};
        CommBuffer m{mine.raw_data(), mine.numel(), mine.dtype(), mine.device(), mine.storage()};
        nccl->reduce_scatter(w, m, ReduceOp::Max)->wait();
        nccl->allgather(m, w)->wait();
        const FlightRecorder* fr = nccl->flight_recorder();
        ASSERT_NE(fr, nullptr);
        for (int i = 0; i < 200; ++i) {
          auto es = fr->entries();
          if (es.size() == 2 && es.back().state == FlightState::Completed) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        auto es = fr->entries();
        ASSERT_EQ(es.size(), 2u);
        for (const FlightEntry& e : es) {
          EXPECT_EQ(e.state, FlightState::Completed);
          EXPECT_GT(e.started_ns, 0);
          EXPECT_GE(e.ended_ns, e.started_ns);
          EXPECT_GE(e.device_ns, 0);
          EXPECT_EQ(e.count, 4099);
          EXPECT_EQ(e.dtype, DType::F32);
        }
        EXPECT_EQ(es[0].kind, CollectiveKind::ReduceScatter);
        EXPECT_EQ(es[0].op, ReduceOp::Max);
        EXPECT_EQ(es[1].kind, CollectiveKind::Allgather);
        EXPECT_EQ(whole.to(Device::cpu()).to_double_vector(), std::vector<double>(4099, 1.0));
      },
      ProcessGroupOptions{});
}
