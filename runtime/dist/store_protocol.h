// store_protocol.h - the byte format spoken between the store client and server (see docs/dist.md).
// Every message is a frame: u32 little-endian body length (at most kMaxMessageBytes) then the body.
// A request body is an op byte and its fields; a reply body is a status byte and its fields.
// Strings are u32 length + bytes; integers are little-endian i64. The first request must be Hello.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/dist/socket_io.h"

namespace ddp::dist::proto {

inline constexpr uint32_t kMaxMessageBytes = 64u << 20;  // 64 MiB: anything larger drops the connection
inline constexpr const char* kMagic = "ddp-store/1";

enum class Op : uint8_t {
  Hello = 1,       // magic, token                     -> Ok | Refused
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
// Receives one frame body; a declared length over kMaxMessageBytes gives TooLarge without reading it.
FrameResult read_frame(int fd, std::string& body, net::Clock::time_point deadline);

}  // namespace ddp::dist::proto
