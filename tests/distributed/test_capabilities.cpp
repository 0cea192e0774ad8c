// test_capabilities.cpp - callers ask a process group what it can do, never its backend name: the CPU
// backends take host memory and record no device events; a group that reduces device memory only, whatever
// its name, gets host data staged through a GPU (host_collectives.h) and CPU buffers refused by the shared
// argument check; and a group's store prefix is chosen in one place (group_name).
#include <gtest/gtest.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/distributed/collective.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_server.h"

using namespace ddp;

namespace {

// A world-of-one group that claims to reduce device memory only, under a name no code may compare against.
// It records the device of every buffer it is handed and completes at once (one rank: nothing to reduce).
class DeviceOnlyGroup : public dist::ProcessGroup {
 public:
  DeviceOnlyGroup() : ProcessGroup(0, 1) {}
  std::vector<Device> devices_seen;

  std::shared_ptr<dist::Work> allreduce(dist::CommBuffer buf, dist::ReduceOp) override { return seen(buf); }
  std::shared_ptr<dist::Work> broadcast(dist::CommBuffer buf, int) override { return seen(buf); }
  std::shared_ptr<dist::Work> allgather(dist::CommBuffer in, dist::CommBuffer) override { return seen(in); }
  std::shared_ptr<dist::Work> reduce_scatter(dist::CommBuffer in, dist::CommBuffer, dist::ReduceOp) override {
    return seen(in);
  }
  std::shared_ptr<dist::Work> barrier() override { return done(); }
  uint64_t next_sequence_number() const override { return 0; }
  std::string backend_name() const override { return "somegpu"; }
  bool device_memory_only() const override { return true; }
  void abort(const std::string& why) override { abort_reason_ = why; }
  bool aborted() const override { return abort_reason_.has_value(); }

 private:
  std::optional<std::string> abort_reason_;  // collectives after abort() fail with it

  std::shared_ptr<dist::Work> seen(const dist::CommBuffer& b) {
    devices_seen.push_back(b.device);
    return done();
  }
  std::shared_ptr<dist::Work> done() const {
    auto w = std::make_shared<dist::Work>("fake");
    if (abort_reason_)
      w->finish(std::make_exception_ptr(Error("somegpu: the group was aborted: " + *abort_reason_)));
    else
      w->finish();
    return w;
  }
};

}  // namespace

TEST(GroupCapabilities, CpuBackendsTakeHostMemory) {
  for (const std::string backend : {"gloo", "shm", "hier"}) {
    std::mutex mu;
    std::vector<int> device_only, device_events;
    dist::run_threads(
        2,
        [&](int, dist::ProcessGroup& pg) {
          std::lock_guard<std::mutex> g(mu);
          device_only.push_back(pg.device_memory_only());
          device_events.push_back(pg.records_device_events());
        },
        dist::ProcessGroupOptions{}, backend);
    EXPECT_EQ(device_only, std::vector<int>({0, 0})) << backend;
    EXPECT_EQ(device_events, std::vector<int>({0, 0})) << backend;
  }
}

TEST(GroupCapabilities, HostCollectivesStageForADeviceOnlyGroupWhateverItsName) {
  DeviceOnlyGroup pg;
  Tensor t = Tensor::from_data<double>({1.5, 2.5}, {2});
  if (cuda_device_count() == 0) {
    // Staging needs a GPU: the host tensor must never reach the group as a CPU buffer.
    EXPECT_THROW(host_allreduce(pg, t), Error);
    EXPECT_THROW(host_broadcast(pg, t, 0), Error);
    EXPECT_TRUE(pg.devices_seen.empty()) << "a CPU buffer was handed to a device-memory-only group";
  } else {
    host_allreduce(pg, t);
    host_broadcast(pg, t, 0);
    ASSERT_EQ(pg.devices_seen.size(), 2u);
    for (const Device& d : pg.devices_seen) EXPECT_TRUE(d.is_cuda());
    EXPECT_EQ(t.to_double_vector(), std::vector<double>({1.5, 2.5}));
  }
}

TEST(GroupCapabilities, ArgumentCheckRefusesHostBuffersForDeviceOnlyGroups) {
  Tensor t = Tensor::from_data<float>({1, 2, 3}, {3});
  dist::CommBuffer buf = comm_buffer_of(t);
  EXPECT_NO_THROW(dist::check_buffer(buf, "allreduce buffer", "somegpu", /*device_memory_only=*/false));
  try {
    dist::check_buffer(buf, "allreduce buffer", "somegpu", /*device_memory_only=*/true);
    FAIL() << "a CPU buffer passed the check of a device-memory-only group";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("somegpu: allreduce buffer lives on cpu"), std::string::npos) << m;
    EXPECT_NE(m.find("CUDA memory only"), std::string::npos) << m;
  }
}

TEST(GroupName, GivenNameOrTheNextCounterValue) {
  dist::StoreServer server("127.0.0.1", 0, "t");
  dist::Store store("127.0.0.1", server.port(), "t");
  dist::ProcessGroupOptions named;
  named.name = "mine";
  EXPECT_EQ(dist::group_name(named, store), "mine");
  const dist::ProcessGroupOptions unnamed;
  EXPECT_EQ(dist::group_name(unnamed, store), "pg0") << "a given name must not advance the counter";
  EXPECT_EQ(dist::group_name(unnamed, store), "pg1");
  EXPECT_EQ(dist::group_name(named, store), "mine");
  EXPECT_EQ(dist::group_name(unnamed, store), "pg2");
}
