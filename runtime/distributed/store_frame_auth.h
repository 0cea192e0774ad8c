// store_frame_auth.h - authentication of the store's frames after the handshake. The handshake proves that
// both ends know the run token, but only for its own frames: a relay that forwards it untouched could then
// rewrite, inject, replay or reorder requests and replies. So both ends derive a session key from the token
// and both nonces, and every later frame carries an HMAC-SHA256 tag over a direction label, that direction's
// frame counter and the body. The counter is not sent: each end counts, so a replayed, dropped, reordered or
// reflected frame fails its tag like an altered one.
//
//   session_key = HMAC-SHA256(token, "ddp-store session" client_nonce server_nonce)
//   tag         = HMAC-SHA256(session_key, label u64-le(counter) body)   label "c>s" or "s>c"
//   frame       = u32 length of (body tag), body, tag (32 bytes)
//
// With an empty token there is nothing secret to derive a key from: frames go without tags, as before.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/distributed/sha256.h"

namespace ddp::dist::proto {

inline constexpr size_t kTagBytes = 32;

class FrameAuth {
 public:
  enum class Side { Client, Server };

  // Off: seal() and open() pass frames through (before the handshake, or without a token).
  FrameAuth() = default;
  // After a handshake that proved `token` with these nonces. An empty token gives an Off instance.
  FrameAuth(const std::string& token, const std::string& client_nonce, const std::string& server_nonce,
            Side side);

  bool on() const { return on_; }
  // A finished frame (length prefix and body, as Writer::frame() gives) with the tag of this end's next
  // frame appended and the prefix updated. Throws ddp::Error when the result would exceed kMaxMessageBytes
  // (the peer would drop the connection), on or off.
  std::string seal(std::string frame);
  // Checks and strips the tag of the peer's next frame body. False when the body is shorter than a tag or the
  // tag is wrong (the body was altered, injected, replayed, reordered or truncated on the way); the stream
  // must then be dropped: its counters are out of step.
  bool open(std::string& body);

 private:
  Digest tag(const char* label, uint64_t counter, const char* body, size_t n) const;

  bool on_ = false;
  Side side_ = Side::Client;
  std::string key_;
  uint64_t sent_ = 0;      // frames this end sealed
  uint64_t received_ = 0;  // frames of the peer this end opened
};

}  // namespace ddp::dist::proto
