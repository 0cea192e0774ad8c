// test_group_arguments.cpp - the argument checks every queued CPU group (gloo, shm, hier) makes before it
// touches the store or the network: a missing store, a rank outside [0, size), a non-positive collective
// timeout - each refused with the backend's name and the rule.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "runtime/distributed/gloo_group.h"
#include "runtime/distributed/shm/hier_group.h"
#include "runtime/distributed/shm/shm_group.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_server.h"

using namespace ddp;
using namespace ddp::dist;

namespace {
using MakeGroup = std::function<void(std::shared_ptr<Store>, int, int, const ProcessGroupOptions&)>;

void expect_refused(const MakeGroup& make, std::shared_ptr<Store> store, int rank, int size,
                    const ProcessGroupOptions& options, const std::string& expected) {
  try {
    make(std::move(store), rank, size, options);
    ADD_FAILURE() << "accepted; expected: " << expected;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(QueuedGroupArguments, EachBackendRefusesMissingStoreBadRankAndZeroTimeout) {
  StoreServer server("127.0.0.1", 0, "t");
  auto store = std::make_shared<Store>("127.0.0.1", server.port(), "t", std::chrono::seconds(10));
  const std::pair<std::string, MakeGroup> backends[] = {
      {"gloo", [](std::shared_ptr<Store> s, int r, int n,
                  const ProcessGroupOptions& o) { GlooProcessGroup(std::move(s), r, n, o, "127.0.0.1"); }},
      {"shm", [](std::shared_ptr<Store> s, int r, int n,
                 const ProcessGroupOptions& o) { ShmProcessGroup(std::move(s), r, n, o); }},
      {"hier",
       [](std::shared_ptr<Store> s, int r, int n, const ProcessGroupOptions& o) {
         HierProcessGroup(std::move(s), r, n, o, "127.0.0.1", {});
       }},
  };
  const ProcessGroupOptions good;
  ProcessGroupOptions zero_timeout;
  zero_timeout.timeout = std::chrono::milliseconds(0);
  for (const auto& [name, make] : backends) {
    SCOPED_TRACE(name);
    expect_refused(make, nullptr, 0, 1, good, name + ": a process group needs a store");
    expect_refused(make, store, 2, 2, good,
                   name + ": rank 2 of world size 2 is invalid: expected 0 <= rank < size");
    expect_refused(make, store, -1, 2, good, name + ": rank -1 of world size 2 is invalid");
    expect_refused(make, store, 0, 1, zero_timeout,
                   name + ": the collective timeout must be positive, got 0 ms");
  }
}
