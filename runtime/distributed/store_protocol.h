// store_protocol.h - the byte format spoken between the store client and server (see docs/dist.md).
// Every message is a frame: u32 little-endian body length (at most kMaxMessageBytes) then the body.
// A request body is an op byte and its fields; a reply body is a status byte and its fields.
// Strings are u32 length + bytes; integers are little-endian i64.
//
// Authentication (a challenge-response; the run token itself never crosses the wire). The server reads at
// most kMaxHelloBytes per frame until the client has proved the token.
//   client -> Hello  magic, client_nonce (32 random bytes)
//   server -> Ok     server_nonce, server_proof = HMAC-SHA256(token, "ddp-store server" cn sn)
//   client checks server_proof (a program squatting on the port cannot make it, and learns nothing but a
//   random nonce), then
//   client -> Prove  client_proof = HMAC-SHA256(token, "ddp-store client" cn sn)
//   server -> Ok | Refused "wrong run token"
// Only then are other requests served. Every later frame, both ways, carries an HMAC-SHA256 tag under a
// session key derived from the token and both nonces, with a counter per direction (store_frame_auth.h).
// An empty token runs the same exchange (it authenticates nothing) and tags nothing.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/distributed/socket_io.h"

namespace ddp::dist::proto {

inline constexpr uint32_t kMaxMessageBytes = 64u << 20;  // 64 MiB: anything larger drops the connection
inline constexpr uint32_t kMaxHelloBytes = 256;          // hello and prove frames are small: cap before auth
inline constexpr const char* kMagic = "ddp-store/3";     // 3: frames after the handshake carry a tag
inline constexpr size_t kNonceBytes = 32;

enum class Op : uint8_t {
  Hello = 1,       // magic, client_nonce              -> Ok server_nonce server_proof
  Prove = 9,       // client_proof                     -> Ok | Refused message
  Set = 2,         // key, value                       -> Ok
  Get = 3,         // key, timeout_ms                  -> Ok value | TimedOut
  Add = 4,         // key, delta                       -> Ok new_value | Error message
  Wait = 5,        // n, n keys, timeout_ms            -> Ok | TimedOut n missing keys
  CompareSet = 6,  // key, expected, desired           -> Ok value now stored
  Delete = 7,      // key                              -> Ok deleted(u8)
  NumKeys = 8,     //                                  -> Ok count
};

enum class Status : uint8_t { Ok = 0, TimedOut = 1, Error = 2, Refused = 3 };

// Builds one frame.
class Writer {
 public:
  Writer() : buf_(4, '\0') {}
  Writer& u8(uint8_t v);
  Writer& u32(uint32_t v);
  Writer& i64(int64_t v);
  Writer& str(const std::string& s);
  // The finished frame (length prefix filled in).
  const std::string& frame();

 private:
  std::string buf_;
};

// Reads fields out of a frame body; any read past the end throws ProtocolError.
struct ProtocolError {
  std::string what;
};
class Reader {
 public:
  explicit Reader(const std::string& body) : body_(body) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  std::string str();
  bool at_end() const { return pos_ == body_.size(); }

 private:
  void need(size_t n);
  const std::string& body_;
  size_t pos_ = 0;
};

enum class FrameResult { Ok, Closed, TimedOut, TooLarge };
// Receives one frame body; a declared length over max_bytes gives TooLarge without reading (or allocating)
// it.
FrameResult read_frame(int fd, std::string& body, net::Clock::time_point deadline,
                       uint32_t max_bytes = kMaxMessageBytes);

// The proofs of the handshake (see the top of this file).
std::string server_proof(const std::string& token, const std::string& client_nonce,
                         const std::string& server_nonce);
std::string client_proof(const std::string& token, const std::string& client_nonce,
                         const std::string& server_nonce);
// kNonceBytes bytes from the kernel's random source.
std::string random_nonce();

}  // namespace ddp::dist::proto
