// torch_store_client.cpp - PyTorch's c10d TCPStore protocol, client side (see torch_store_client.h).
#include "runtime/distributed/torch_store_client.h"

#include <unistd.h>

#include <cstring>

#include "runtime/core/error.h"
#include "runtime/core/log.h"

namespace ddp::dist {

namespace {
constexpr uint32_t kValidationMagic = 0x3C85F7CE;  // PyTorch 2.x validationMagicNumber
constexpr uint8_t kReady = 0, kStopWaiting = 0, kWaitCanceled = 1;
constexpr uint64_t kMaxValueBytes = uint64_t{1} << 30;

// Host byte order, as PyTorch sends (memcpy of the integer); every supported platform is little-endian.
template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}
// PyTorch's TCPStore client prefixes every user key with "/" (keyPrefix_); so do we, to share its keys.
void put_key(std::string& out, const std::string& key) { put_bytes(out, "/" + key); }
}  // namespace

TorchStoreClient::TorchStoreClient(std::string host, int port, TorchProtocol protocol,
                                   std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), protocol_(protocol), timeout_(timeout) {
  open();
}

std::unique_ptr<StoreClient> TorchStoreClient::clone() const {
  return std::make_unique<TorchStoreClient>(host_, port_, protocol_, timeout_);
}

std::string TorchStoreClient::describe() const {
  const char* v = protocol_ == TorchProtocol::V1   ? " (1.x protocol)"
                  : protocol_ == TorchProtocol::V2 ? " (2.x protocol)"
                                                   : "";
  return "PyTorch's TCPStore" + std::string(v) + " at " + host_ + ":" + std::to_string(port_);
}

uint8_t TorchStoreClient::code(Cmd c) const {
  // 1.13: SET 0 ... DELETE_KEY 8 (WATCH_KEY 7 unused). 2.x: VALIDATE 0 shifts all of them by one up to
  // GETNUMKEYS; DELETE_KEY stays 8 (WATCH_KEY was removed); CANCEL_WAIT 12, PING 13.
  const bool v2 = protocol_ == TorchProtocol::V2;
  switch (c) {
    case Cmd::Validate:
      return 0;
    case Cmd::Set:
      return v2 ? 1 : 0;
    case Cmd::CompareSet:
      return v2 ? 2 : 1;
    case Cmd::Get:
      return v2 ? 3 : 2;
    case Cmd::Add:
      return v2 ? 4 : 3;
    case Cmd::Check:
      return v2 ? 5 : 4;
    case Cmd::Wait:
      return v2 ? 6 : 5;
    case Cmd::GetNumKeys:
      return v2 ? 7 : 6;
    case Cmd::DeleteKey:
      return 8;
    case Cmd::CancelWait:
      return 12;
    case Cmd::Ping:
      return 13;
  }
  return 0xff;
}

net::Clock::time_point TorchStoreClient::reply_deadline() const { return net::deadline_after(timeout_); }

void TorchStoreClient::open() {
  socket_ = net::connect_with_retry(host_, port_, net::deadline_after(timeout_));
  if (protocol_ == TorchProtocol::Auto) {
    // The probe is the 2.x handshake: a 2.x server echoes its ping on this connection, which we keep; a 1.x
    // server closes it at once (see handshake()), and we reconnect speaking 1.x.
    protocol_ = TorchProtocol::V2;
    const bool v2 = handshake(/*probing=*/true);
    if (!v2) {
      protocol_ = TorchProtocol::V1;
      socket_ = net::connect_with_retry(host_, port_, net::deadline_after(timeout_));
    }
    DDP_LOG(Info, "PyTorch's store at ", host_, ":", port_, " speaks the ", v2 ? "2.x" : "1.x", " protocol");
    return;
  }
  if (protocol_ == TorchProtocol::V2) handshake(/*probing=*/false);
}

bool TorchStoreClient::handshake(bool probing) {
  // VALIDATE + magic, then PING + nonce. A 1.x server reads these 10 bytes as a SET (0) whose key length is
  // the next 8 bytes: the magic, the PING byte and the nonce's low 3 bytes, the last of them the length's top
  // byte. With that byte >= 0x80 the length is beyond any vector (std::length_error, nothing allocated) and
  // the 1.x server drops the connection at once, storing nothing (Debian's 1.13 checked, test_torch_store).
  const uint32_t nonce = 0x00FF0000u | (static_cast<uint32_t>(::getpid()) & 0xFFFFu);
  std::string m;
  put<uint8_t>(m, code(Cmd::Validate));
  put<uint32_t>(m, kValidationMagic);
  put<uint8_t>(m, code(Cmd::Ping));
  put<uint32_t>(m, nonce);
  if (!probing) {
    send(m, "the 2.x handshake");
    uint32_t echo = 0;
    recv(&echo, sizeof(echo), reply_deadline(), "the 2.x handshake");
    check_echo(echo, nonce);
    return true;
  }
  uint32_t echo = 0;
  net::RecvResult r = net::RecvResult::Closed;
  try {
    net::send_all(socket_.fd(), m.data(), m.size(), describe());
    r = net::recv_exact(socket_.fd(), &echo, sizeof(echo), reply_deadline());
  } catch (const Error&) {
    r = net::RecvResult::Closed;  // reset before we finished sending: a 1.x server
  }
  if (r == net::RecvResult::Closed) {
    socket_.close();
    return false;
  }
  if (r == net::RecvResult::TimedOut) {
    socket_.close();
    DDP_FAIL("the server at ", host_, ":", port_, " neither answered PyTorch 2.x's TCPStore handshake nor ",
             "closed the connection (as 1.x does) within ", timeout_.count(),
             " ms: is it PyTorch's TCPStore? Set DDP_TORCH_STORE_PROTOCOL=1 or 2 to the launcher's version");
  }
  check_echo(echo, nonce);
  return true;
}

void TorchStoreClient::check_echo(uint32_t echo, uint32_t nonce) {
  if (echo == nonce) return;
  socket_.close();
  DDP_FAIL(describe(), " answered the 2.x handshake's ping with ", echo, " instead of ", nonce,
           "; set DDP_TORCH_STORE_PROTOCOL to the launcher's PyTorch version (1 or 2)");
}

void TorchStoreClient::send(const std::string& bytes, const std::string& what) {
  if (!socket_.valid()) open();
  try {
    net::send_all(socket_.fd(), bytes.data(), bytes.size(), describe());
  } catch (const Error& e) {
    socket_.close();
    DDP_FAIL("store ", what, ": ", e.what(), " (did the torchrun agent exit?)");
  }
}

void TorchStoreClient::recv(void* out, size_t n, net::Clock::time_point deadline, const std::string& what) {
  auto r = net::recv_exact(socket_.fd(), out, n, deadline);
  if (r == net::RecvResult::Ok) return;
  socket_.close();
  if (r == net::RecvResult::Closed)
    DDP_FAIL("store ", what, ": ", describe(),
             " closed the connection (did the torchrun agent exit? if the launcher's PyTorch speaks another "
             "protocol version, set DDP_TORCH_STORE_PROTOCOL=1 or 2)");
  DDP_FAIL("store ", what, ": no reply from ", describe(), " within ", timeout_.count(), " ms");
}

uint8_t TorchStoreClient::recv_u8(const std::string& what) {
  uint8_t v = 0;
  recv(&v, 1, reply_deadline(), what);
  return v;
}

int64_t TorchStoreClient::recv_i64(const std::string& what) {
  int64_t v = 0;
  recv(&v, sizeof(v), reply_deadline(), what);
  return v;
}

std::string TorchStoreClient::recv_bytes(const std::string& what) {
  uint64_t n = 0;
  recv(&n, sizeof(n), reply_deadline(), what);
  if (n > kMaxValueBytes) {
    socket_.close();
    DDP_FAIL("store ", what, ": ", describe(), " announced a ", n, "-byte value (more than 1 GiB)");
  }
  std::string s(n, '\0');
  recv(s.data(), n, reply_deadline(), what);
  return s;
}

void TorchStoreClient::set(const std::string& key, const std::string& value) {
  std::string m;
  put<uint8_t>(m, code(Cmd::Set));
  put_key(m, key);
  put_bytes(m, value);
  send(m, "set '" + key + "'");  // SET has no reply
}

bool TorchStoreClient::check(const std::vector<std::string>& keys) {
  std::string m;
  put<uint8_t>(m, code(Cmd::Check));
  put<uint64_t>(m, keys.size());
  for (auto& k : keys) put_key(m, k);
  send(m, "check");
  return recv_u8("check") == kReady;
}

bool TorchStoreClient::wait_keys(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string m;
  put<uint8_t>(m, code(Cmd::Wait));
  put<uint64_t>(m, keys.size());
  for (auto& k : keys) put_key(m, k);
  send(m, "wait");
  uint8_t reply = 0;
  auto r = net::recv_exact(socket_.fd(), &reply, 1, net::deadline_after(timeout));
  if (r == net::RecvResult::Ok) return reply == kStopWaiting;
  if (r == net::RecvResult::Closed) recv(&reply, 1, reply_deadline(), "wait");  // throws naming the cause
  if (protocol_ == TorchProtocol::V1) {
    socket_.close();  // the server still owes a STOP_WAITING on this connection: start a fresh one
    return false;
  }
  // 2.x: cancel the wait; a STOP_WAITING that raced the cancel comes first, then WAIT_CANCELED.
  std::string cancel;
  put<uint8_t>(cancel, code(Cmd::CancelWait));
  send(cancel, "cancel wait");
  bool ready = false;
  for (;;) {
    uint8_t b = recv_u8("cancel wait");
    if (b == kWaitCanceled) return ready;
    ready = true;
  }
}

std::vector<std::string> TorchStoreClient::wait(const std::vector<std::string>& keys,
                                                std::chrono::milliseconds timeout) {
  if (keys.empty() || wait_keys(keys, timeout)) return {};
  std::vector<std::string> missing;
  for (auto& k : keys)
    if (!check({k})) missing.push_back(k);
  return missing;
}

std::optional<std::string> TorchStoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  // Like PyTorch's client: WAIT first, since a GET of a missing key makes the server drop the connection.
  if (!wait_keys({key}, timeout)) return std::nullopt;
  std::string m;
  put<uint8_t>(m, code(Cmd::Get));
  put_key(m, key);
  send(m, "get '" + key + "'");
  return recv_bytes("get '" + key + "'");
}

std::optional<std::string> TorchStoreClient::try_get(const std::string& key) {
  if (!check({key})) return std::nullopt;
  return get(key, timeout_);
}

int64_t TorchStoreClient::add(const std::string& key, int64_t delta) {
  std::string m;
  put<uint8_t>(m, code(Cmd::Add));
  put_key(m, key);
  put<int64_t>(m, delta);
  send(m, "add '" + key + "'");
  return recv_i64("add '" + key +
                  "' (a key that holds no integer makes PyTorch's store drop the connection)");
}

std::string TorchStoreClient::compare_set(const std::string& key, const std::string& expected,
                                          const std::string& desired) {
  std::string m;
  put<uint8_t>(m, code(Cmd::CompareSet));
  put_key(m, key);
  put_bytes(m, expected);
  put_bytes(m, desired);
  send(m, "compare_set '" + key + "'");
  std::string reply = recv_bytes("compare_set '" + key + "'");
  // PyTorch answers `expected` (storing nothing) when the key is absent and expected is not empty; a present
  // key equal to expected would have been swapped to desired. Map that to "absent" = "".
  if (!expected.empty() && reply == expected) {
    if (expected != desired) return "";
    return check({key}) ? reply : "";
  }
  return reply;
}

bool TorchStoreClient::delete_key(const std::string& key) {
  std::string m;
  put<uint8_t>(m, code(Cmd::DeleteKey));
  put_key(m, key);
  send(m, "delete_key '" + key + "'");
  return recv_i64("delete_key '" + key + "'") != 0;
}

int64_t TorchStoreClient::num_keys() {
  std::string m;
  put<uint8_t>(m, code(Cmd::GetNumKeys));
  send(m, "num_keys");
  return recv_i64("num_keys");
}

}  // namespace ddp::dist
