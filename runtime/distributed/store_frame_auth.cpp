// store_frame_auth.cpp - session key and per-frame tags of the store (see store_frame_auth.h).
#include "runtime/distributed/store_frame_auth.h"

#include "runtime/core/error.h"
#include "runtime/distributed/store_protocol.h"

namespace ddp::dist::proto {

namespace {
constexpr const char* kClientToServer = "c>s";
constexpr const char* kServerToClient = "s>c";

std::string as_string(const Digest& d) {
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}
}  // namespace

FrameAuth::FrameAuth(const std::string& token, const std::string& client_nonce,
                     const std::string& server_nonce, Side side)
    : on_(!token.empty()), side_(side) {
  if (on_) key_ = as_string(hmac_sha256(token, "ddp-store session" + client_nonce + server_nonce));
}

Digest FrameAuth::tag(const char* label, uint64_t counter, const char* body, size_t n) const {
  std::string message(label);
  for (int i = 0; i < 8; ++i) message.push_back(static_cast<char>(counter >> (8 * i)));
  message.append(body, n);
  return hmac_sha256(key_, message);
}

std::string FrameAuth::seal(std::string frame) {
  DDP_CHECK(frame.size() >= 4, "FrameAuth::seal: not a frame (", frame.size(), " bytes)");
  const size_t body = frame.size() - 4, tag_bytes = on_ ? kTagBytes : 0;
  DDP_CHECK(body + tag_bytes <= kMaxMessageBytes, "store: a message of ", body,
            " bytes is too large: the store takes at most ", kMaxMessageBytes - tag_bytes,
            " bytes per request or reply (key and value together); keep large data out of the store");
  if (!on_) return frame;
  const Digest t =
      tag(side_ == Side::Client ? kClientToServer : kServerToClient, sent_++, frame.data() + 4, body);
  frame.append(reinterpret_cast<const char*>(t.data()), t.size());
  const uint32_t n = static_cast<uint32_t>(body + kTagBytes);
  for (int i = 0; i < 4; ++i) frame[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return frame;
}

bool FrameAuth::open(std::string& body) {
  if (!on_) return true;
  if (body.size() < kTagBytes) return false;
  const size_t n = body.size() - kTagBytes;
  const Digest expected =
      tag(side_ == Side::Client ? kServerToClient : kClientToServer, received_, body.data(), n);
  if (!bytes_equal_constant_time(
          std::string_view(body).substr(n),
          std::string_view(reinterpret_cast<const char*>(expected.data()), expected.size())))
    return false;
  ++received_;
  body.resize(n);
  return true;
}

}  // namespace ddp::dist::proto
