// test_failure_messages.cpp - what a rank reports when a collective fails: a peer that closed its
// connection (its process or its node's launcher was killed) is named as such, with the time since the
// collective started, not as a timeout that never happened.
#include <gtest/gtest.h>

#include <thread>

#include "runtime/distributed/collective_tracker.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_server.h"

using namespace ddp::dist;
using namespace std::chrono_literals;

TEST(FailureMessages, APeerThatClosedItsConnectionIsNamedWithTheTimeSinceTheStart) {
  StoreServer server("127.0.0.1", 0, "t");
  auto store = std::make_shared<Store>("127.0.0.1", server.port(), "t", 10s);
  CollectiveTracker tracker(store, "pg0", /*rank=*/0, /*size=*/2, std::chrono::milliseconds(600000));
  store->set("pg0/arrived/1", "5");  // the peer had reached collective #5 too
  CollectiveDesc d;
  d.kind = CollectiveKind::Allreduce;
  d.seq = 5;
  d.count = 16;
  tracker.mark_arrived(5);
  std::this_thread::sleep_for(50ms);
  std::string msg = tracker.failure_message(
      d, "gloo", "[gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:1234");
  EXPECT_NE(msg.find("a peer closed its connection"), std::string::npos) << msg;
  EXPECT_NE(msg.find("launcher was stopped"), std::string::npos) << msg;
  EXPECT_NE(msg.find(" s after it started (timeout 600000 ms)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("after timeout 600000 ms"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("too slow"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Connection closed by peer"), std::string::npos) << msg;  // the cause stays quoted
  // A real timeout still reads as one, with the time it took.
  std::string timeout = tracker.failure_message(d, "gloo", "Timed out waiting 600000ms for recv operation");
  EXPECT_EQ(timeout.find("a peer closed"), std::string::npos) << timeout;
  EXPECT_NE(timeout.find("(timeout 600000 ms)"), std::string::npos) << timeout;
}
