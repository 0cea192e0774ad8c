// store.cpp - the store client: one TCP connection, one request at a time, replies read with a deadline a
// little past the server-side timeout so a dead server is noticed too.
#include "runtime/dist/store.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/dist/store_protocol.h"

namespace ddp::dist {

using proto::Op;
using proto::Status;

namespace {
// How long past a server-side wait the client keeps listening before it calls the server dead.
constexpr auto kReplyGrace = std::chrono::seconds(10);

// Server-side waits are capped at a week (the protocol refuses more); longer asks mean "forever" anyway.
int64_t wire_ms(std::chrono::milliseconds t) {
  return std::clamp<int64_t>(t.count(), 0, int64_t{7} * 24 * 3600 * 1000);
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s;
}
}  // namespace

Store::Store(std::string host, int port, std::string token, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), token_(std::move(token)), timeout_(timeout) {
  DDP_CHECK(port_ > 0 && port_ <= 65535, "store port ", port_,
            " is out of range: expected 1..65535 (MASTER_PORT)");
  DDP_CHECK(timeout_.count() > 0, "store timeout must be positive, got ", timeout_.count(), " ms");
  socket_ = net::connect_with_retry(host_, port_, net::deadline_after(timeout_));
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Hello)).str(proto::kMagic).str(token_);
  std::string reply = roundtrip(w.frame(), "hello", std::chrono::milliseconds(0));
  proto::Reader in(reply);
  DDP_CHECK(static_cast<Status>(in.u8()) == Status::Ok, "the store at ", where(),
            " refused this client: wrong run token; every rank must get the same DDP_RUN_TOKEN as the store");
}

Store::~Store() = default;

std::shared_ptr<Store> Store::clone() const {
  return std::make_shared<Store>(host_, port_, token_, timeout_);
}

std::string Store::where() const { return host_ + ":" + std::to_string(port_); }

std::string Store::roundtrip(const std::string& frame, const std::string& what,
                             std::chrono::milliseconds wait_ms) {
  std::lock_guard<std::mutex> g(mu_);
  DDP_CHECK(socket_.valid(), "store ", what, ": the connection to ", where(),
            " was lost by an earlier failure");
  try {
    net::send_all(socket_.fd(), frame.data(), frame.size(), "store " + where());
  } catch (const Error&) {
    socket_.close();
    throw;
  }
  std::string body;
  auto r = proto::read_frame(socket_.fd(), body,
                             net::deadline_after(std::chrono::milliseconds(wire_ms(wait_ms)) + kReplyGrace));
  if (r != proto::FrameResult::Ok) {
    socket_.close();  // the stream is out of step now: never reuse it
    if (r == proto::FrameResult::Closed)
      DDP_FAIL("store ", what, ": the store at ", where(),
               " closed the connection (did rank 0 or the launcher exit, or is the run token wrong?)");
    DDP_FAIL("store ", what, ": no reply from the store at ", where(), " (server hung or unreachable)");
  }
  DDP_CHECK(!body.empty(), "store ", what, ": empty reply from ", where());
  if (static_cast<Status>(body[0]) == Status::Error) {
    proto::Reader in(body);
    in.u8();
    DDP_FAIL("store ", what, ": ", in.str());
  }
  return body;
}

void Store::set(const std::string& key, const std::string& value) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Set)).str(key).str(value);
  roundtrip(w.frame(), "set '" + key + "'", std::chrono::milliseconds(0));
}

std::string Store::get(const std::string& key) { return get(key, timeout_); }

std::string Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Get)).str(key).i64(wire_ms(timeout));
  std::string body = roundtrip(w.frame(), "get '" + key + "'", timeout);
  proto::Reader in(body);
  DDP_CHECK(static_cast<Status>(in.u8()) == Status::Ok, "store get: key '", key, "' did not appear within ",
            timeout.count(), " ms (store ", where(), "); did every rank reach this point?");
  return in.str();
}

std::optional<std::string> Store::try_get(const std::string& key) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Get)).str(key).i64(0);
  std::string body = roundtrip(w.frame(), "get '" + key + "'", std::chrono::milliseconds(0));
  proto::Reader in(body);
  if (static_cast<Status>(in.u8()) != Status::Ok) return std::nullopt;
  return in.str();
}

int64_t Store::add(const std::string& key, int64_t delta) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Add)).str(key).i64(delta);
  std::string body = roundtrip(w.frame(), "add '" + key + "'", std::chrono::milliseconds(0));
  proto::Reader in(body);
  in.u8();
  return in.i64();
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Wait)).u32(static_cast<uint32_t>(keys.size()));
  for (auto& k : keys) w.str(k);
  w.i64(wire_ms(timeout));
  std::string body = roundtrip(w.frame(), "wait " + join_keys(keys), timeout);
  proto::Reader in(body);
  if (static_cast<Status>(in.u8()) == Status::Ok) return;
  std::vector<std::string> missing(in.u32());
  for (auto& k : missing) k = in.str();
  DDP_FAIL("store wait: key(s) ", join_keys(missing), " did not appear within ", timeout.count(),
           " ms (store ", where(), "); did every rank reach this point?");
}

std::string Store::compare_set(const std::string& key, const std::string& expected,
                               const std::string& desired) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::CompareSet)).str(key).str(expected).str(desired);
  std::string body = roundtrip(w.frame(), "compare_set '" + key + "'", std::chrono::milliseconds(0));
  proto::Reader in(body);
  in.u8();
  return in.str();
}

bool Store::delete_key(const std::string& key) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Delete)).str(key);
  std::string body = roundtrip(w.frame(), "delete_key '" + key + "'", std::chrono::milliseconds(0));
  proto::Reader in(body);
  in.u8();
  return in.u8() != 0;
}

int64_t Store::num_keys() {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::NumKeys));
  std::string body = roundtrip(w.frame(), "num_keys", std::chrono::milliseconds(0));
  proto::Reader in(body);
  in.u8();
  return in.i64();
}

}  // namespace ddp::dist
