// test_store_frame_auth.cpp - the store's frames after the handshake are authenticated (issue 25, item 11):
// a man-in-the-middle relay on loopback forwards the handshake untouched, then rewrites, injects or replays a
// request, or alters or replays a reply. The server drops the connection with a clear warning and applies
// nothing forged; the client refuses a tampered reply. An honest relay changes nothing, and without a token
// the wire stays as it was (no tags). Nothing here measures time.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/distributed/socket_io.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_protocol.h"
#include "runtime/distributed/store_server.h"

using namespace ddp::dist;
using namespace std::chrono_literals;

namespace {
const std::string kToken = "relay-test-token-0123456789";

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "";
}

std::string frame_of(const std::string& body) {
  std::string f(4, '\0');
  const uint32_t n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) f[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return f + body;
}

// `body` with the first `from` replaced by `to` (same length); unchanged when absent.
std::string rewritten(std::string body, const std::string& from, const std::string& to) {
  const size_t at = body.find(from);
  if (at != std::string::npos) body.replace(at, from.size(), to);
  return body;
}

// What the relay does with each request after the handshake: the frames it sends to the server instead,
// each marked true when its reply goes back to the client (the others' replies are swallowed).
using RequestTamper =
    std::function<std::vector<std::pair<std::string, bool>>(int index, const std::string& body)>;
// The reply body the client gets for its request `index`, given the server's and the earlier ones.
using ReplyTamper = std::function<std::string(int index, const std::string& body)>;

// A man in the middle on 127.0.0.1: accepts one client, connects to the server, forwards the four handshake
// frames untouched, then hands each request and reply to the tampers. Ends when either side closes (and then
// closes the other side).
class Relay {
 public:
  Relay(int server_port, RequestTamper on_request, ReplyTamper on_reply = nullptr)
      : listener_(net::listen_on("127.0.0.1", 0)), port_(net::local_port(listener_)) {
    thread_ =
        std::thread([this, server_port, on_request, on_reply] { run(server_port, on_request, on_reply); });
  }
  ~Relay() {
    listener_.shutdown();  // wakes an accept() that no client reached (a test that failed early)
    join();
  }
  int port() const { return port_; }
  // Waits until the relay stopped (after the client or the server closed).
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  // Request bodies the relay saw from the client after the handshake.
  const std::vector<std::string>& requests() const { return requests_; }

 private:
  static bool forward(int from, int to) {
    std::string body;
    if (proto::read_frame(from, body, net::deadline_after(10s)) != proto::FrameResult::Ok) return false;
    const std::string f = frame_of(body);
    net::send_all(to, f.data(), f.size(), "relay");
    return true;
  }

  void run(int server_port, const RequestTamper& on_request, const ReplyTamper& on_reply) {
    const int cfd = ::accept(listener_.fd(), nullptr, nullptr);
    if (cfd < 0) return;
    net::Socket client(cfd);
    net::Socket server = net::connect_with_retry("127.0.0.1", server_port, net::deadline_after(5s));
    try {
      // Hello, challenge, proof, verdict: untouched.
      if (!forward(cfd, server.fd()) || !forward(server.fd(), cfd) || !forward(cfd, server.fd()) ||
          !forward(server.fd(), cfd))
        return;
      for (int index = 0;; ++index) {
        std::string request;
        if (proto::read_frame(cfd, request, net::deadline_after(10s)) != proto::FrameResult::Ok) return;
        requests_.push_back(request);
        for (const auto& [body, to_client] : on_request(index, request)) {
          const std::string f = frame_of(body);
          net::send_all(server.fd(), f.data(), f.size(), "relay");
          std::string reply;
          if (proto::read_frame(server.fd(), reply, net::deadline_after(10s)) != proto::FrameResult::Ok)
            return;  // the server dropped us: `client` closes too
          if (!to_client) continue;
          const std::string out = frame_of(on_reply ? on_reply(index, reply) : reply);
          net::send_all(cfd, out.data(), out.size(), "relay");
        }
      }
    } catch (const ddp::Error&) {  // a peer went away mid-send
    }
  }

  net::Socket listener_;
  int port_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

std::vector<std::pair<std::string, bool>> unchanged(int, const std::string& body) { return {{body, true}}; }

// Stderr of `f` (the server's warnings).
template <class F>
std::string stderr_of(F f) {
  ::testing::internal::CaptureStderr();
  f();
  return ::testing::internal::GetCapturedStderr();
}

const char* const kRejected = "failed its authentication tag";
}  // namespace

TEST(StoreFrameAuth, AnHonestRelayChangesNothing) {
  StoreServer server("127.0.0.1", 0, kToken);
  Relay relay(server.port(), unchanged);
  {
    Store s("127.0.0.1", relay.port(), kToken, 5s);
    s.set("a", "1");
    EXPECT_EQ(s.get("a"), "1");
    EXPECT_EQ(s.add("n", 5), 5);
    EXPECT_EQ(s.compare_set("a", "1", "2"), "2");
    EXPECT_TRUE(s.delete_key("a"));
    EXPECT_EQ(s.num_keys(), 1);
  }
  relay.join();
  EXPECT_EQ(server.dropped_connections(), 0);
}

TEST(StoreFrameAuth, ARewrittenRequestIsRejectedAndNothingForgedIsStored) {
  StoreServer server("127.0.0.1", 0, kToken);
  // The relay changes the address rank 0 publishes (same length, so every length field stays right).
  Relay relay(server.port(), [](int, const std::string& body) {
    return std::vector<std::pair<std::string, bool>>{{rewritten(body, "10.0.0.1", "66.6.6.6"), true}};
  });
  std::string client_error;
  const std::string warnings = stderr_of([&] {
    {
      Store s("127.0.0.1", relay.port(), kToken, 5s);
      client_error = error_of([&] { s.set("rank0_addr", "10.0.0.1:29500"); });
    }
    relay.join();
  });
  ASSERT_EQ(relay.requests().size(), 1u);
  EXPECT_NE(relay.requests()[0].find("10.0.0.1"), std::string::npos) << "the relay did not see the value";
  Store direct("127.0.0.1", server.port(), kToken, 5s);
  EXPECT_EQ(direct.try_get("rank0_addr"), std::nullopt) << "the server stored a forged value";
  EXPECT_NE(client_error.find("closed the connection"), std::string::npos) << client_error;
  EXPECT_NE(warnings.find(kRejected), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("nothing of it was applied"), std::string::npos) << warnings;
  EXPECT_GE(server.dropped_connections(), 1);
}

TEST(StoreFrameAuth, AnInjectedRequestIsRejectedAndNothingForgedIsStored) {
  StoreServer server("127.0.0.1", 0, kToken);
  // Before the client's first request, the relay slips in one of its own (it cannot tag it).
  Relay relay(server.port(), [](int index, const std::string& body) {
    std::vector<std::pair<std::string, bool>> out;
    if (index == 0) {
      proto::Writer forged;
      forged.u8(static_cast<uint8_t>(proto::Op::Set)).str("rank0_addr").str("66.6.6.6:29500");
      out.emplace_back(forged.frame().substr(4), false);
      // A forged frame with a tag-sized tail of garbage is no better.
      out.emplace_back(forged.frame().substr(4) + std::string(32, 'x'), false);
    }
    out.emplace_back(body, true);
    return out;
  });
  std::string client_error;
  const std::string warnings = stderr_of([&] {
    {
      Store s("127.0.0.1", relay.port(), kToken, 5s);
      client_error = error_of([&] { s.set("hello", "1"); });
    }
    relay.join();
  });
  Store direct("127.0.0.1", server.port(), kToken, 5s);
  EXPECT_EQ(direct.try_get("rank0_addr"), std::nullopt) << "the server stored the injected value";
  EXPECT_EQ(direct.try_get("hello"), std::nullopt) << "the stream should have been dropped at the injection";
  EXPECT_NE(client_error, "");
  EXPECT_NE(warnings.find(kRejected), std::string::npos) << warnings;
}

TEST(StoreFrameAuth, AReplayedRequestIsRejected) {
  StoreServer server("127.0.0.1", 0, kToken);
  // The relay sends the client's add twice (the client gets the first reply).
  Relay relay(server.port(), [](int index, const std::string& body) {
    std::vector<std::pair<std::string, bool>> out{{body, true}};
    if (index == 0) out.emplace_back(body, false);
    return out;
  });
  std::string warnings = stderr_of([&] {
    {
      Store s("127.0.0.1", relay.port(), kToken, 5s);
      EXPECT_EQ(s.add("counter", 1), 1);
    }
    relay.join();  // the relay has sent the replay and read the server's answer (or its close)
  });
  Store direct("127.0.0.1", server.port(), kToken, 5s);
  EXPECT_EQ(direct.get("counter"), "1") << "the replayed add was applied";
  EXPECT_NE(warnings.find(kRejected), std::string::npos) << warnings;
}

TEST(StoreFrameAuth, ATamperedReplyIsRefusedByTheClient) {
  StoreServer server("127.0.0.1", 0, kToken);
  // The relay rewrites the value in the reply to the client's second request (a get).
  Relay relay(server.port(), unchanged, [](int index, const std::string& body) {
    return index == 1 ? rewritten(body, "10.0.0.1", "66.6.6.6") : body;
  });
  Store s("127.0.0.1", relay.port(), kToken, 5s);
  s.set("rank0_addr", "10.0.0.1:29500");
  std::string got;
  const std::string err = error_of([&] { got = s.get("rank0_addr"); });
  EXPECT_EQ(got, "") << "the client used a tampered reply";
  EXPECT_NE(err.find(kRejected), std::string::npos) << err;
  EXPECT_NE(err.find("get 'rank0_addr'"), std::string::npos) << err;
  EXPECT_NE(error_of([&] { s.get("rank0_addr"); }), "") << "the connection must not be reused";
}

TEST(StoreFrameAuth, AReplayedReplyIsRefusedByTheClient) {
  StoreServer server("127.0.0.1", 0, kToken);
  // The reply to the first get ("1") is given again for the second (a stale answer).
  std::string first_reply;
  Relay relay(server.port(), unchanged, [&first_reply](int index, const std::string& body) {
    if (index == 2) first_reply = body;
    return index == 3 ? first_reply : body;
  });
  Store s("127.0.0.1", relay.port(), kToken, 5s);
  s.set("a", "1");
  s.set("b", "2");
  EXPECT_EQ(s.get("a"), "1");
  std::string got;
  const std::string err = error_of([&] { got = s.get("b"); });
  EXPECT_EQ(got, "") << "the client took the reply of another request";
  EXPECT_NE(err.find(kRejected), std::string::npos) << err;
}

TEST(StoreFrameAuth, WithoutATokenFramesCarryNoTagAsBefore) {
  StoreServer server("127.0.0.1", 0, "");
  Relay relay(server.port(), unchanged);
  {
    Store s("127.0.0.1", relay.port(), "", 5s);
    s.set("k", "v");
    EXPECT_EQ(s.get("k"), "v");
  }
  relay.join();
  proto::Writer expected;
  expected.u8(static_cast<uint8_t>(proto::Op::Set)).str("k").str("v");
  ASSERT_GE(relay.requests().size(), 1u);
  EXPECT_EQ(relay.requests()[0], expected.frame().substr(4));
}

TEST(StoreFrameAuth, WithATokenEveryRequestCarriesATag) {
  StoreServer server("127.0.0.1", 0, kToken);
  Relay relay(server.port(), unchanged);
  {
    Store s("127.0.0.1", relay.port(), kToken, 5s);
    s.set("k", "v");
    s.set("k", "v");
  }
  relay.join();
  proto::Writer plain;
  plain.u8(static_cast<uint8_t>(proto::Op::Set)).str("k").str("v");
  const std::string body = plain.frame().substr(4);
  ASSERT_EQ(relay.requests().size(), 2u);
  for (const std::string& r : relay.requests()) {
    ASSERT_EQ(r.size(), body.size() + 32);
    EXPECT_EQ(r.substr(0, body.size()), body);
  }
  EXPECT_NE(relay.requests()[0], relay.requests()[1]) << "the same request twice must carry different tags";
}
