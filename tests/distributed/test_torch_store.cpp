// test_torch_store.cpp - our client of PyTorch's c10d TCPStore protocol (used under torchrun's agent store):
// every Store operation against an in-test fake server of each dialect (1.13; 2.x legacy and libuv), the
// version probe, wait timeouts that leave the connection usable, PyTorch's compare_set and key prefix
// conventions, and the real servers: Debian's PyTorch 1.13 TCPStore and PyTorch 2.x's (PyPI venv of
// tools/setup_torch2.sh) libuv and legacy servers, each skipped with the reason when not installed.
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
#include "tests/support/torch_python.h"

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
                      Dialect{FakeTorchStore::Version::V2Legacy, TorchProtocol::Auto, "v2_legacy_auto"},
                      Dialect{FakeTorchStore::Version::V2LibUv, TorchProtocol::Auto, "v2_libuv_auto"}),
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
    FakeTorchStore libuv(FakeTorchStore::Version::V2LibUv);
    TorchStoreClient c("127.0.0.1", libuv.port(), TorchProtocol::Auto, 10s);
    EXPECT_EQ(c.protocol(), TorchProtocol::V2);
    c.set("k", "v");
    EXPECT_EQ(c.get("k", 5s).value_or("?"), "v");
    // A clone keeps the dialect: no second probe (the probe's connection, kept, and the clone's).
    auto clone = c.clone();
    EXPECT_EQ(clone->try_get("k").value_or("?"), "v");
    EXPECT_EQ(libuv.connections(), 2);
  }
}

// The probe is the 2.x handshake, which every server answers at once: a 2.x server (legacy or libuv) echoes
// the ping on that connection, which the client then keeps; a 1.x server reads it as a SET whose key length
// is beyond any allocation and closes the connection, and the client reconnects speaking 1.x. Before, the
// probe was a 1.x GETNUMKEYS that a 2.x libuv server never answers, so every rank under torchrun 2.x waited
// out a 3 s window and opened a second connection. Counted in connections, not seconds.
TEST(TorchStore, ProbeIsDecidedByTheServersAnswerNotByATimeout) {
  for (auto v : {FakeTorchStore::Version::V2LibUv, FakeTorchStore::Version::V2Legacy}) {
    FakeTorchStore server(v);
    TorchStoreClient c("127.0.0.1", server.port(), TorchProtocol::Auto, 10s);
    EXPECT_EQ(c.protocol(), TorchProtocol::V2);
    c.set("k", "v");
    EXPECT_EQ(c.try_get("k").value_or("?"), "v");
    EXPECT_EQ(server.connections(), 1) << "the probe's connection is the one in use";
  }
  FakeTorchStore v1(FakeTorchStore::Version::V1);
  TorchStoreClient c("127.0.0.1", v1.port(), TorchProtocol::Auto, 10s);
  EXPECT_EQ(c.protocol(), TorchProtocol::V1);
  c.set("k", "v");
  EXPECT_EQ(c.try_get("k").value_or("?"), "v");
  EXPECT_EQ(v1.connections(), 2) << "the 1.x server closed the probe; one more connection in 1.x";
  EXPECT_EQ(v1.data().size(), 1u) << "the probe wrote nothing";
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

// ---- against PyTorch's own servers: Debian's 1.13, PyPI's 2.x (libuv and legacy) ----------------

namespace {
struct RealServer {
  ddp::testing::TorchKind torch;
  const char* use_libuv;   // TCPStore(use_libuv=...): "" for 1.13 (no such argument), "True" or "False"
  TorchProtocol expected;  // what the Auto probe must find
  const char* name;
};
class RealTorchStore : public ::testing::TestWithParam<RealServer> {};
}  // namespace

// Python hosts the server and is a client of it too; we drive every operation and check that each side
// sees the other's writes: set/get (text and binary), add from both sides, wait (one that times out, then
// one that a Python write ends), compare_set (both outcomes, and on an absent key), delete_key, num_keys and
// check (our try_get; Python's s.check), all under torchrun's key prefix.
TEST_P(RealTorchStore, EveryOperationAgreesWithPyTorchsServer) {
  const auto& torch = ddp::testing::torch_python(GetParam().torch);
  DDP_REQUIRE_TORCH(torch);
  int port = 0;
  {
    auto probe = net::listen_on("127.0.0.1", 0);
    port = net::local_port(probe);
  }
  const std::string libuv = GetParam().use_libuv;
  const std::string script = std::string(R"(
import datetime, sys
import torch.distributed as dist
P = "ddp/run7/attempt_1/"
kw = {} if sys.argv[2] == "" else {"use_libuv": sys.argv[2] == "True"}
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True, timeout=datetime.timedelta(seconds=60),
                  wait_for_workers=False, **kw)
if "use_libuv" in kw:
    assert s.libuvBackend == kw["use_libuv"], (s.libuvBackend, kw)
s.wait([P + "cpp_done"])
assert s.get(P + "from_cpp") == b"hello", s.get(P + "from_cpp")
assert s.get(P + "bin") == b"\x00\xff\x01zz", s.get(P + "bin")
assert s.get(P + "counter") == b"5", s.get(P + "counter")
assert s.add(P + "counter", 2) == 7
if hasattr(s, "check"):  # 2.x's Python API; 1.13 has none
    assert s.check([P + "from_cpp", P + "bin"])
    assert not s.check([P + "cas"]), "we deleted it"
assert s.get(P + "cas2") == b"x"
s.set(P + "from_py", "world")
s.wait([P + "done"])
print("python saw", s.get(P + "done").decode(), "cas2", s.get(P + "cas2").decode())
)");
  ddp::testing::ProcessResult py;
  std::thread host([&] {
    ddp::testing::ProcessOptions o;
    o.timeout_s = 120;
    o.unset_env = {"PYTHONPATH", "PYTHONHOME"};
    py = ddp::testing::run_process({torch.python, "-c", script, std::to_string(port), libuv}, o);
  });
  std::string err = error_of([&] {
    Store s(torch_at(port, TorchProtocol::Auto, "ddp/run7/attempt_1/"), 60s);
    const int64_t keys_before = s.num_keys();  // the server may hold keys of its own (2.x: none, 1.13: none)
    s.set("from_cpp", "hello");
    s.set("bin", std::string("\0\xff\x01zz", 5));
    EXPECT_EQ(s.add("counter", 5), 5);
    EXPECT_EQ(s.compare_set("cas", "", "x"), "x");       // absent, expected "": set
    EXPECT_EQ(s.compare_set("cas", "wrong", "y"), "x");  // present, mismatch: the current value
    EXPECT_EQ(s.compare_set("cas2", "", "x"), "x");
    EXPECT_EQ(s.compare_set("cas2", "x", "x"), "x");  // present, match
    EXPECT_EQ(s.compare_set("nope", "a", "b"), "");   // absent, expected not "": nothing set
    EXPECT_EQ(s.try_get("nope"), std::nullopt);
    EXPECT_EQ(s.num_keys() - keys_before, 5);  // from_cpp, bin, counter, cas, cas2
    EXPECT_TRUE(s.delete_key("cas"));
    EXPECT_FALSE(s.delete_key("cas"));
    EXPECT_EQ(s.num_keys() - keys_before, 4);
    std::string wait_err = error_of([&] { s.wait({"from_cpp", "never"}, 300ms); });
    EXPECT_NE(wait_err.find("'never'"), std::string::npos) << wait_err;
    EXPECT_EQ(wait_err.find("'from_cpp'"), std::string::npos) << wait_err;
    s.set("cpp_done", "1");                     // the connection is still usable after the timed-out wait
    EXPECT_EQ(s.get("from_py", 60s), "world");  // a wait that Python's write ends
    EXPECT_EQ(s.get("counter"), "7");           // Python's add on our counter
    EXPECT_EQ(s.add("counter", -10), -3);
    // A second connection of ours, with the dialect the probe found.
    TorchStoreClient probe("127.0.0.1", port, TorchProtocol::Auto, 60s);
    EXPECT_EQ(probe.protocol(), GetParam().expected);
    EXPECT_EQ(probe.try_get("/ddp/run7/attempt_1/from_py").value_or("?"), "?")
        << "the client adds PyTorch's '/' itself: a second one is another key";
    EXPECT_EQ(probe.try_get("ddp/run7/attempt_1/from_py").value_or("?"), "world");
    s.set("done", "yes");
  });
  host.join();
  EXPECT_EQ(err, "");
  EXPECT_EQ(py.exit_code, 0) << py.out << py.err;
  EXPECT_NE(py.out.find("python saw yes cas2 x"), std::string::npos) << py.out << py.err;
}

INSTANTIATE_TEST_SUITE_P(
    Servers, RealTorchStore,
    ::testing::Values(RealServer{ddp::testing::TorchKind::Debian113, "", TorchProtocol::V1, "torch113"},
                      RealServer{ddp::testing::TorchKind::PyPI2, "True", TorchProtocol::V2, "torch2_libuv"},
                      RealServer{ddp::testing::TorchKind::PyPI2, "False", TorchProtocol::V2,
                                 "torch2_legacy"}),
    [](const auto& info) { return std::string(info.param.name); });
