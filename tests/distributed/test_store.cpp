// test_store.cpp - the TCP store: every operation, timeouts naming keys, the run token, and a server that
// survives hostile clients (garbage, huge lengths, a close mid-message) while serving a good one.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/distributed/socket_io.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_protocol.h"
#include "runtime/distributed/store_server.h"

using namespace ddp::dist;
using namespace std::chrono_literals;

namespace {
const std::string kToken = "secret-token";

struct StoreFixture : ::testing::Test {
  StoreServer server{"127.0.0.1", 0, kToken};
  std::unique_ptr<Store> client(std::chrono::milliseconds timeout = 5s) {
    return std::make_unique<Store>("127.0.0.1", server.port(), kToken, timeout);
  }
  // A raw socket to the server, for speaking bad protocol.
  net::Socket raw() { return net::connect_with_retry("127.0.0.1", server.port(), net::deadline_after(5s)); }
};

std::string hello(const std::string& nonce = std::string(proto::kNonceBytes, 'n')) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(proto::Op::Hello)).str(proto::kMagic).str(nonce);
  return w.frame();
}

// The client side of the handshake on a raw socket; true when the server accepted the token.
bool authenticate(const net::Socket& s, const std::string& token) {
  const std::string cn(proto::kNonceBytes, 'c');
  std::string h = hello(cn);
  net::send_all(s.fd(), h.data(), h.size(), "server");
  std::string reply;
  if (proto::read_frame(s.fd(), reply, net::deadline_after(5s)) != proto::FrameResult::Ok) return false;
  proto::Reader in(reply);
  in.u8();
  std::string sn = in.str();
  proto::Writer prove;
  prove.u8(static_cast<uint8_t>(proto::Op::Prove)).str(proto::client_proof(token, cn, sn));
  net::send_all(s.fd(), prove.frame().data(), prove.frame().size(), "server");
  if (proto::read_frame(s.fd(), reply, net::deadline_after(5s)) != proto::FrameResult::Ok) return false;
  return static_cast<proto::Status>(reply.at(0)) == proto::Status::Ok;
}

// Waits until the server closed the raw connection (recv returns 0); false if it stays open for 5 s.
bool server_closes(const net::Socket& s) {
  char buf[256];
  auto deadline = net::deadline_after(5s);
  while (true) {
    auto r = net::recv_exact(s.fd(), buf, 1, deadline);
    if (r == net::RecvResult::Closed) return true;
    if (r == net::RecvResult::TimedOut) return false;
  }
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_F(StoreFixture, SetGetOverwriteAndBinaryValues) {
  auto s = client();
  s->set("a", "1");
  EXPECT_EQ(s->get("a"), "1");
  s->set("a", "two");
  EXPECT_EQ(s->get("a"), "two");
  std::string binary("\0\xff\x01zz", 5);
  s->set("bin", binary);
  EXPECT_EQ(s->get("bin"), binary);
  EXPECT_EQ(s->try_get("absent"), std::nullopt);
  EXPECT_EQ(s->try_get("a").value(), "two");
}

TEST_F(StoreFixture, GetBlocksUntilAnotherClientSets) {
  auto a = client();
  std::thread writer([&] {
    auto b = client();
    std::this_thread::sleep_for(50ms);
    b->set("late", "here");
  });
  EXPECT_EQ(a->get("late", 5s), "here");
  writer.join();
}

TEST_F(StoreFixture, GetTimeoutNamesTheKey) {
  auto s = client();
  std::string err = error_of([&] { s->get("never/set", 100ms); });
  EXPECT_NE(err.find("'never/set'"), std::string::npos) << err;
  EXPECT_NE(err.find("100 ms"), std::string::npos) << err;
  // The connection stays usable after a timeout.
  s->set("x", "y");
  EXPECT_EQ(s->get("x"), "y");
}

TEST_F(StoreFixture, AddIsAtomicAcrossClients) {
  constexpr int kThreads = 4, kAdds = 50;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      auto s = client();
      for (int i = 0; i < kAdds; ++i) s->add("counter", 1);
    });
  for (auto& t : ts) t.join();
  auto s = client();
  EXPECT_EQ(s->add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(s->add("counter", -5), kThreads * kAdds - 5);
  EXPECT_EQ(s->get("counter"), std::to_string(kThreads * kAdds - 5));
  s->set("text", "abc");
  std::string err = error_of([&] { s->add("text", 1); });
  EXPECT_NE(err.find("'text'"), std::string::npos) << err;
}

TEST_F(StoreFixture, WaitForSeveralKeysAndTimeoutNamesMissing) {
  auto s = client();
  s->set("k1", "v");
  std::thread writer([&] {
    auto b = client();
    std::this_thread::sleep_for(30ms);
    b->set("k2", "v");
  });
  s->wait({"k1", "k2"}, 5s);
  writer.join();
  std::string err = error_of([&] { s->wait({"k1", "missing-a", "missing-b"}, 100ms); });
  EXPECT_NE(err.find("'missing-a'"), std::string::npos) << err;
  EXPECT_NE(err.find("'missing-b'"), std::string::npos) << err;
  EXPECT_EQ(err.find("'k1'"), std::string::npos) << err;
}

TEST_F(StoreFixture, CompareSetDeleteAndNumKeys) {
  auto s = client();
  EXPECT_EQ(s->num_keys(), 0);
  EXPECT_EQ(s->compare_set("cas", "", "first"), "first");  // absent counts as ""
  EXPECT_EQ(s->compare_set("cas", "wrong", "second"), "first");
  EXPECT_EQ(s->compare_set("cas", "first", "second"), "second");
  EXPECT_EQ(s->compare_set("absent", "x", "y"), "");
  EXPECT_EQ(s->try_get("absent"), std::nullopt);
  s->set("other", "1");
  EXPECT_EQ(s->num_keys(), 2);
  EXPECT_TRUE(s->delete_key("cas"));
  EXPECT_FALSE(s->delete_key("cas"));
  EXPECT_EQ(s->num_keys(), 1);
  EXPECT_EQ(s->try_get("cas"), std::nullopt);
}

TEST_F(StoreFixture, WrongTokenIsRefusedWithAClearError) {
  std::string err = error_of([&] { Store bad("127.0.0.1", server.port(), "not-the-token", 5s); });
  EXPECT_NE(err.find("DDP_RUN_TOKEN"), std::string::npos) << err;
  // The client gives up as soon as the server's proof is wrong; the server notices the close a moment later.
  for (int i = 0; i < 500 && server.dropped_connections() < 1; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(server.dropped_connections(), 1);
  auto good = client();
  good->set("still", "serving");
  EXPECT_EQ(good->get("still"), "serving");
}

TEST_F(StoreFixture, RequestsBeforeHelloAreDropped) {
  auto s = raw();
  proto::Writer w;
  w.u8(static_cast<uint8_t>(proto::Op::Set)).str("sneaky").str("value");
  net::send_all(s.fd(), w.frame().data(), w.frame().size(), "server");
  EXPECT_TRUE(server_closes(s));
  auto good = client();
  EXPECT_EQ(good->try_get("sneaky"), std::nullopt);
}

TEST_F(StoreFixture, GarbageHugeLengthAndMidMessageCloseDoNotStopTheServer) {
  auto good = client();
  good->set("before", "1");
  {  // garbage bytes instead of a hello
    auto s = raw();
    std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    net::send_all(s.fd(), junk.data(), junk.size(), "server");
    EXPECT_TRUE(server_closes(s));
  }
  {  // authenticated, then a frame declaring 4 GiB - 1
    auto s = raw();
    ASSERT_TRUE(authenticate(s, kToken));
    unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
    net::send_all(s.fd(), huge, 4, "server");
    EXPECT_TRUE(server_closes(s));
  }
  {  // authenticated, then a frame whose fields lie about their lengths
    auto s = raw();
    ASSERT_TRUE(authenticate(s, kToken));
    proto::Writer w;
    w.u8(static_cast<uint8_t>(proto::Op::Set)).u32(1000000).u8('k');
    net::send_all(s.fd(), w.frame().data(), w.frame().size(), "server");
    EXPECT_TRUE(server_closes(s));
  }
  {  // unknown op
    auto s = raw();
    ASSERT_TRUE(authenticate(s, kToken));
    proto::Writer w;
    w.u8(200);
    net::send_all(s.fd(), w.frame().data(), w.frame().size(), "server");
    EXPECT_TRUE(server_closes(s));
  }
  {  // close in the middle of a message: the length says 100 bytes, 10 arrive
    auto s = raw();
    ASSERT_TRUE(authenticate(s, kToken));
    unsigned char len[4] = {100, 0, 0, 0};
    net::send_all(s.fd(), len, 4, "server");
    net::send_all(s.fd(), "0123456789", 10, "server");
  }
  {  // close in the middle of the hello
    auto s = raw();
    std::string h = hello();
    net::send_all(s.fd(), h.data(), h.size() / 2, "server");
  }
  EXPECT_EQ(good->get("before"), "1");
  good->set("after", "2");
  EXPECT_EQ(client()->get("after"), "2");
  EXPECT_GE(server.dropped_connections(), 4);
}

TEST(Store, ClientRetriesUntilTheServerStarts) {
  // Find a free port, release it, start the server on it a little later.
  int port = 0;
  {
    auto probe = net::listen_on("127.0.0.1", 0);
    port = net::local_port(probe);
  }
  std::unique_ptr<StoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    server = std::make_unique<StoreServer>("127.0.0.1", port, "t");
  });
  Store s("127.0.0.1", port, "t", 10s);
  starter.join();
  s.set("k", "v");
  EXPECT_EQ(s.get("k"), "v");
}

TEST(Store, ConnectTimeoutNamesTheAddress) {
  int port = 0;
  {
    auto probe = net::listen_on("127.0.0.1", 0);
    port = net::local_port(probe);
  }
  std::string err = error_of([&] { Store s("127.0.0.1", port, "t", 300ms); });
  EXPECT_NE(err.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << err;
  EXPECT_NE(err.find("MASTER_ADDR"), std::string::npos) << err;
}

TEST(Store, ServerGoingAwayGivesAnErrorNotAHang) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, "t");
  Store s("127.0.0.1", server->port(), "t", 5s);
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    server.reset();
  });
  std::string err = error_of([&] { s.get("never", 30s); });
  killer.join();
  EXPECT_NE(err.find("'never'"), std::string::npos) << err;
}

TEST(Store, CloneIsAnIndependentConnection) {
  StoreServer server("127.0.0.1", 0, "t");
  auto a = std::make_shared<Store>("127.0.0.1", server.port(), "t", 5s);
  auto b = a->clone();
  std::thread blocker([&] { EXPECT_EQ(b->get("from-a", 5s), "hi"); });
  std::this_thread::sleep_for(20ms);
  a->set("from-a", "hi");  // would deadlock if a and b shared one connection
  blocker.join();
}
