// store_protocol.cpp - frame encoding and decoding for the store (little-endian, length-prefixed).
#include "runtime/distributed/store_protocol.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/distributed/sha256.h"

namespace ddp::dist::proto {

Writer& Writer::u8(uint8_t v) {
  buf_.push_back(static_cast<char>(v));
  return *this;
}
Writer& Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return *this;
}
Writer& Writer::i64(int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  return *this;
}
Writer& Writer::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  buf_.append(s);
  return *this;
}
const std::string& Writer::frame() {
  uint32_t n = static_cast<uint32_t>(buf_.size() - 4);
  for (int i = 0; i < 4; ++i) buf_[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return buf_;
}

void Reader::need(size_t n) {
  if (body_.size() - pos_ < n) throw ProtocolError{"message truncated"};
}
uint8_t Reader::u8() {
  need(1);
  return static_cast<uint8_t>(body_[pos_++]);
}
uint32_t Reader::u32() {
  need(4);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(body_[pos_ + i])) << (8 * i);
  pos_ += 4;
  return v;
}
int64_t Reader::i64() {
  need(8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(body_[pos_ + i])) << (8 * i);
  pos_ += 8;
  return static_cast<int64_t>(v);
}
std::string Reader::str() {
  uint32_t n = u32();
  need(n);
  std::string s = body_.substr(pos_, n);
  pos_ += n;
  return s;
}

FrameResult read_frame(int fd, std::string& body, net::Clock::time_point deadline, uint32_t max_bytes) {
  unsigned char len_bytes[4];
  switch (net::recv_exact(fd, len_bytes, 4, deadline)) {
    case net::RecvResult::Closed:
      return FrameResult::Closed;
    case net::RecvResult::TimedOut:
      return FrameResult::TimedOut;
    case net::RecvResult::Ok:
      break;
  }
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(len_bytes[i]) << (8 * i);
  if (n > max_bytes) return FrameResult::TooLarge;
  body.resize(n);
  switch (net::recv_exact(fd, body.data(), n, deadline)) {
    case net::RecvResult::Closed:
      return FrameResult::Closed;
    case net::RecvResult::TimedOut:
      return FrameResult::TimedOut;
    case net::RecvResult::Ok:
      break;
  }
  return FrameResult::Ok;
}

namespace {
std::string proof(const char* label, const std::string& token, const std::string& cn, const std::string& sn) {
  Digest d = hmac_sha256(token, std::string(label) + cn + sn);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}
}  // namespace

std::string server_proof(const std::string& token, const std::string& client_nonce,
                         const std::string& server_nonce) {
  return proof("ddp-store server", token, client_nonce, server_nonce);
}

std::string client_proof(const std::string& token, const std::string& client_nonce,
                         const std::string& server_nonce) {
  return proof("ddp-store client", token, client_nonce, server_nonce);
}

std::string random_nonce() {
  std::string n(kNonceBytes, '\0');
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    DDP_CHECK(r > 0, "cannot read random bytes for the store handshake: ", std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  return n;
}

}  // namespace ddp::dist::proto
