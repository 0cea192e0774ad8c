// store_fuzz.cpp - libFuzzer harness for the store server's protocol: whatever bytes a client sends, before
// or after authenticating, the server must answer or drop that client and keep serving others - never crash,
// hang or allocate more than the frame caps allow. Not part of the CMake build (tests/CMakeLists.txt skips
// fuzz/); CI runs the seeded random-frame test in tests/distributed/test_store_hardening.cpp instead.
//
// Build and run (from the repository root; clang with libFuzzer, ASan and UBSan):
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/store_fuzz.cpp \
//     runtime/distributed/store_server.cpp runtime/distributed/store_protocol.cpp \
//     runtime/distributed/store_frame_auth.cpp runtime/distributed/socket_io.cpp \
//     runtime/distributed/sha256.cpp runtime/core/log.cpp -o /tmp/store_fuzz
//   mkdir -p /tmp/store_corpus && /tmp/store_fuzz /tmp/store_corpus -max_len=512 -max_total_time=60
//
// Input layout: byte 0 bit 0 = authenticate first; bit 1 (with bit 0) = send the rest as the body of one
// correctly tagged frame (store_frame_auth.h), so the fuzzer reaches the request handler; otherwise the rest
// is sent as-is (and meets the length caps and the tag check). The server is created per input so a request
// blocked in a long wait cannot pile up threads.
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/distributed/socket_io.h"
#include "runtime/distributed/store_frame_auth.h"
#include "runtime/distributed/store_protocol.h"
#include "runtime/distributed/store_server.h"

using namespace ddp::dist;

namespace {
const std::string kToken = "fuzz-token";

bool authenticate(int fd, proto::FrameAuth* auth = nullptr) {
  const std::string cn(proto::kNonceBytes, 'c');
  proto::Writer hello;
  hello.u8(static_cast<uint8_t>(proto::Op::Hello)).str(proto::kMagic).str(cn);
  net::send_all(fd, hello.frame().data(), hello.frame().size(), "server");
  std::string reply;
  auto deadline = net::deadline_after(std::chrono::seconds(2));
  if (proto::read_frame(fd, reply, deadline) != proto::FrameResult::Ok) return false;
  proto::Reader in(reply);
  in.u8();
  const std::string sn = in.str();
  proto::Writer prove;
  prove.u8(static_cast<uint8_t>(proto::Op::Prove)).str(proto::client_proof(kToken, cn, sn));
  net::send_all(fd, prove.frame().data(), prove.frame().size(), "server");
  if (auth) *auth = proto::FrameAuth(kToken, cn, sn, proto::FrameAuth::Side::Client);
  return proto::read_frame(fd, reply, deadline) == proto::FrameResult::Ok;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ddp::log::set_level(ddp::log::Level::Error);  // dropped clients are expected here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  StoreServerLimits limits;
  limits.hello_timeout = std::chrono::milliseconds(200);
  StoreServer server("127.0.0.1", 0, kToken, limits);
  try {
    net::Socket s =
        net::connect_with_retry("127.0.0.1", server.port(), net::deadline_after(std::chrono::seconds(2)));
    proto::FrameAuth auth;
    if ((data[0] & 1) && !authenticate(s.fd(), &auth)) __builtin_trap();  // a correct client must get in
    std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
    if ((data[0] & 3) == 3) {
      std::string frame(4, '\0');
      for (int i = 0; i < 4; ++i)
        frame[static_cast<size_t>(i)] = static_cast<char>((rest.size() >> (8 * i)) & 0xff);
      rest = auth.seal(frame + rest);
    }
    net::send_all(s.fd(), rest.data(), rest.size(), "server");
    ::shutdown(s.fd(), SHUT_WR);
    // Read replies until the server closes or goes quiet; a blocked wait is ended by the server's shutdown.
    char buf[4096];
    while (net::recv_exact(s.fd(), buf, 1, net::deadline_after(std::chrono::milliseconds(20))) ==
           net::RecvResult::Ok) {
    }
  } catch (const ddp::Error&) {
    // The server dropping us mid-send is fine.
  }
  // A second, well-behaved client must still be served after whatever the first one sent.
  net::Socket good =
      net::connect_with_retry("127.0.0.1", server.port(), net::deadline_after(std::chrono::seconds(2)));
  if (!authenticate(good.fd())) __builtin_trap();
  return 0;
}
