// test_torch_store.cpp - our client of PyTorch's c10d TCPStore protocol (used under torchrun's agent store):
// every Store operation against an in-test fake server of each dialect (1.13; 2.x legacy and libuv), the
// version probe, wait timeouts that leave the connection usable, PyTorch's compare_set and key prefix
// conventions, and - when Debian's python3-torch is installed - a real PyTorch TCPStore.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/distributed/socket_io.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/torch_store_client.h"
#include "tests/distributed/fake_torch_store.h"
#include "tests/support/run_process.h"

using namespace ddp::dist;
using namespace std::chrono_literals;
using ddp::testing::FakeTorchStore;

namespace {
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "";
}

StoreAddress torch_at(int port, TorchProtocol p = TorchProtocol::Auto, std::string prefix = "") {
  StoreAddress a;
  a.kind = StoreKind::Torch;
  a.host = "127.0.0.1";
  a.port = port;
  a.torch_protocol = p;
  a.key_prefix = std::move(prefix);
  return a;
}

struct Dialect {
  FakeTorchStore::Version version;
  TorchProtocol protocol;  // what the client is told (Auto probes)
  const char* name;
};

class TorchStoreOps : public ::testing::TestWithParam<Dialect> {};
}  // namespace

TEST_P(TorchStoreOps, EveryOperationWorksAndKeysCarryPyTorchsSlash) {
  FakeTorchStore server(GetParam().version);
  auto s = std::make_shared<Store>(torch_at(server.port(), GetParam().protocol, "ddp/run7/attempt_1/"), 10s);
  s->set("a", "1");
  EXPECT_EQ(s->get("a"), "1");
  std::string binary("\0\xff\x01zz", 5);
  s->set("bin", binary);
  EXPECT_EQ(s->get("bin"), binary);
  EXPECT_EQ(s->try_get("absent"), std::nullopt);
  EXPECT_EQ(s->add("n", 3), 3);
  EXPECT_EQ(s->add("n", -1), 2);
  EXPECT_EQ(s->get("n"), "2");  // PyTorch stores ADD results as ASCII decimal
  EXPECT_EQ(s->compare_set("cas", "", "first"), "first");
  EXPECT_EQ(s->compare_set("cas", "wrong", "second"), "first");
  EXPECT_EQ(s->compare_set("cas", "first", "second"), "second");
  EXPECT_EQ(s->compare_set("absent", "x", "y"), "");  // PyTorch answers "x" here: absent means ""
  EXPECT_EQ(s->compare_set("absent", "x", "x"), "");
  EXPECT_EQ(s->try_get("absent"), std::nullopt);
  EXPECT_TRUE(s->delete_key("cas"));
  EXPECT_FALSE(s->delete_key("cas"));
  EXPECT_EQ(s->num_keys(), 3);  // a, bin, n
  // Keys on the wire: PyTorch's "/" then our run/attempt namespace.
  EXPECT_EQ(server.data().count("/ddp/run7/attempt_1/a"), 1u);
  for (auto& k : server.keys_seen()) EXPECT_EQ(k.rfind("/ddp/run7/attempt_1/", 0), 0u) << k;
}

TEST_P(TorchStoreOps, WaitTimesOutNamingMissingKeysAndTheConnectionStaysUsable) {
  FakeTorchStore server(GetParam().version);
  auto s = std::make_shared<Store>(torch_at(server.port(), GetParam().protocol), 10s);
  s->set("k1", "v");
  std::string err = error_of([&] { s->wait({"k1", "missing-a"}, 200ms); });
  EXPECT_NE(err.find("'missing-a'"), std::string::npos) << err;
  EXPECT_EQ(err.find("'k1'"), std::string::npos) << err;
  EXPECT_NE(err.find("PyTorch's TCPStore"), std::string::npos) << err;
  err = error_of([&] { s->get("never", 200ms); });
  EXPECT_NE(err.find("'never'"), std::string::npos) << err;
  s->set("x", "y");
  EXPECT_EQ(s->get("x"), "y");
  // A get that blocks until another client (a clone: its own connection) sets the key.
  auto other = s->clone();
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    other->set("late", "here");
  });
  EXPECT_EQ(s->get("late", 10s), "here");
  writer.join();
}

INSTANTIATE_TEST_SUITE_P(
    Dialects, TorchStoreOps,
    ::testing::Values(Dialect{FakeTorchStore::Version::V1, TorchProtocol::V1, "v1"},
                      Dialect{FakeTorchStore::Version::V1, TorchProtocol::Auto, "v1_auto"},
                      Dialect{FakeTorchStore::Version::V2Legacy, TorchProtocol::V2, "v2"},
                      Dialect{FakeTorchStore::Version::V2Legacy, TorchProtocol::Auto, "v2_legacy_auto"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(TorchStore, ProbeTellsTheDialectsApart) {
  {
    FakeTorchStore v1(FakeTorchStore::Version::V1);
    TorchStoreClient c("127.0.0.1", v1.port(), TorchProtocol::Auto, 10s);
    EXPECT_EQ(c.protocol(), TorchProtocol::V1);
  }
  {
    FakeTorchStore legacy(FakeTorchStore::Version::V2Legacy);
    TorchStoreClient c("127.0.0.1", legacy.port(), TorchProtocol::Auto, 10s);
    EXPECT_EQ(c.protocol(), TorchProtocol::V2);
  }
  {
    FakeTorchStore libuv(FakeTorchStore::Version::V2LibUv);  // ignores the probe: decided after the window
    TorchStoreClient c("127.0.0.1", libuv.port(), TorchProtocol::Auto, 10s);
    EXPECT_EQ(c.protocol(), TorchProtocol::V2);
    c.set("k", "v");
    EXPECT_EQ(c.get("k", 5s).value_or("?"), "v");
    // A clone keeps the dialect: no second probe (one probe connection + two real ones).
    auto clone = c.clone();
    EXPECT_EQ(clone->try_get("k").value_or("?"), "v");
    EXPECT_EQ(libuv.connections(), 3);
  }
}

TEST(TorchStore, AddOnTextIsAClearErrorNotAHang) {
  FakeTorchStore server(FakeTorchStore::Version::V1);
  Store s(torch_at(server.port(), TorchProtocol::V1), 10s);
  s.set("text", "abc");
  std::string err = error_of([&] { s.add("text", 1); });
  EXPECT_NE(err.find("'text'"), std::string::npos) << err;
  EXPECT_NE(err.find("closed the connection"), std::string::npos) << err;
  s.set("after", "1");  // the next call opens a fresh connection
  EXPECT_EQ(s.get("after"), "1");
}

// ---- against Debian's PyTorch 1.13 (python3-torch) ----------------------------------------------

namespace {
bool have_torch() {
  static const bool ok = [] {
    auto r = ddp::testing::run_process({"/usr/bin/python3", "-c", "import torch.distributed"}, {});
    return r.exit_code == 0;
  }();
  return ok;
}
}  // namespace

TEST(TorchStore, RealPyTorchStoreSharesKeysBothWays) {
  if (!have_torch()) GTEST_SKIP() << "python3-torch is not installed (apt-get install python3-torch)";
  int port = 0;
  {
    auto probe = net::listen_on("127.0.0.1", 0);
    port = net::local_port(probe);
  }
  const std::string script = R"(
import datetime, sys
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True, timeout=datetime.timedelta(seconds=60),
                  wait_for_workers=False)
s.wait(["from_cpp", "counter"])
assert s.get("from_cpp") == b"hello", s.get("from_cpp")
assert s.get("counter") == b"5", s.get("counter")
s.set("from_py", "world")
s.wait(["done"])
print("python saw", s.get("done").decode(), s.num_keys())
)";
  ddp::testing::ProcessResult py;
  std::thread host([&] {
    ddp::testing::ProcessOptions o;
    o.timeout_s = 120;
    py = ddp::testing::run_process({"/usr/bin/python3", "-c", script, std::to_string(port)}, o);
  });
  std::string err = error_of([&] {
    Store s(torch_at(port), 60s);
    s.set("from_cpp", "hello");
    EXPECT_EQ(s.add("counter", 5), 5);
    EXPECT_EQ(s.get("from_py", 60s), "world");
    EXPECT_EQ(s.compare_set("cas", "", "x"), "x");
    EXPECT_EQ(s.compare_set("nope", "a", "b"), "");
    EXPECT_EQ(s.try_get("nope"), std::nullopt);
    EXPECT_TRUE(s.delete_key("cas"));
    std::string wait_err = error_of([&] { s.wait({"never"}, 300ms); });
    EXPECT_NE(wait_err.find("'never'"), std::string::npos) << wait_err;
    s.set("done", "yes");
  });
  host.join();
  EXPECT_EQ(err, "");
  EXPECT_EQ(py.exit_code, 0) << py.out << py.err;
  EXPECT_NE(py.out.find("python saw yes"), std::string::npos) << py.out << py.err;
}
