// ddp_store_client.cpp - our store's client: replies are read with a deadline a little past the server-side
// timeout, so a dead server is noticed too; a stream that went out of step is never reused.
#include "runtime/distributed/ddp_store_client.h"

#include <algorithm>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/distributed/store_protocol.h"

namespace ddp::dist {

using proto::Op;
using proto::Status;

namespace {
// How long past a server-side wait the client keeps listening before it calls the server dead.
constexpr auto kReplyGrace = std::chrono::seconds(10);
// How long a client keeps retrying a server that closes connections before its handshake (busy).
constexpr std::chrono::milliseconds kBusyRetry = std::chrono::seconds(20);

// Server-side waits are capped at a week (the protocol refuses more); longer asks mean "forever" anyway.
int64_t wire_ms(std::chrono::milliseconds t) {
  return std::clamp<int64_t>(t.count(), 0, int64_t{7} * 24 * 3600 * 1000);
}
}  // namespace

DdpStoreClient::DdpStoreClient(std::string host, int port, std::string token,
                               std::chrono::milliseconds timeout, std::string job_id)
    : host_(std::move(host)), job_id_(std::move(job_id)), port_(port), token_(std::move(token)), timeout_(timeout) {
  // A server at its limit of clients in their handshake closes new connections at once: try again a while.
  const auto deadline = net::deadline_after(timeout_);
  const auto retry_until = net::deadline_after(std::min<std::chrono::milliseconds>(timeout_, kBusyRetry));
  auto backoff = std::chrono::milliseconds(50);
  for (;;) {
    socket_ = net::connect_with_retry(host_, port_, deadline);
    if (handshake()) return;
    if (net::Clock::now() + backoff >= retry_until)
      DDP_FAIL("the store at ", where(), " closed every connection before its handshake for ",
               std::chrono::duration_cast<std::chrono::seconds>(kBusyRetry).count(),
               " s: it is overloaded, or the program on that port is not a ddp store of this version; check "
               "MASTER_ADDR/MASTER_PORT");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

bool DdpStoreClient::handshake() {
  auth_ = proto::FrameAuth();  // the handshake's own frames are not tagged
  const std::string client_nonce = proto::random_nonce();
  proto::Writer hello;
  hello.u8(static_cast<uint8_t>(Op::Hello)).str(proto::kMagic).str(client_nonce);
  net::send_all(socket_.fd(), hello.frame().data(), hello.frame().size(), "store " + where());
  std::string body;
  auto r = proto::read_frame(socket_.fd(), body, net::deadline_after(kReplyGrace), proto::kMaxHelloBytes);
  if (r == proto::FrameResult::Closed) {
    socket_.close();
    return false;
  }
  if (r != proto::FrameResult::Ok) {
    socket_.close();
    DDP_FAIL("the program listening at ", where(),
             " did not answer the store hello like a ddp store; check MASTER_ADDR/MASTER_PORT");
  }
  std::string server_nonce, server_proof;
  try {
    proto::Reader in(body);
    DDP_CHECK(static_cast<Status>(in.u8()) == Status::Ok, "store hello refused by ", where());
    server_nonce = in.str();
    server_proof = in.str();
  } catch (const proto::ProtocolError&) {
    socket_.close();
    DDP_FAIL("the program listening at ", where(),
             " is not a ddp store (its hello reply is malformed); check MASTER_ADDR/MASTER_PORT");
  }
  if (server_nonce.size() != proto::kNonceBytes ||
      !bytes_equal_constant_time(server_proof, proto::server_proof(token_, client_nonce, server_nonce))) {
    socket_.close();
    DDP_FAIL("wrong run token: the store at ", where(),
             " could not prove that it knows this run's token (rank 0 got a different DDP_RUN_TOKEN, or "
             "another program holds the port; nothing secret was sent to it); every rank must get the same "
             "DDP_RUN_TOKEN");
  }
  proto::Writer prove;
  prove.u8(static_cast<uint8_t>(Op::Prove))
      .str(proto::client_proof(token_, client_nonce, server_nonce))
      .str(job_id_);
  const std::string reply = roundtrip(prove.frame(), "hello", std::chrono::milliseconds(0));
  proto::Reader in(reply);  // a view: the reply must outlive it
  if (static_cast<Status>(in.u8()) != Status::Ok) {
    const std::string why = in.at_end() ? std::string("wrong run token") : in.str();
    socket_.close();
    if (why.rfind("another job", 0) == 0)
      DDP_FAIL("the store at ", where(), " belongs to ", why, ": two jobs on this host use the same MASTER_PORT ",
               "with the same DDP_RUN_TOKEN. Give this job another port (ddprun --standalone picks a free one, ",
               "or --master-port 0), or stop the other job");
    DDP_FAIL("the store at ", where(), " refused this client: ", why,
             "; every rank must get the same DDP_RUN_TOKEN as the store");
  }
  auth_ = proto::FrameAuth(token_, client_nonce, server_nonce, proto::FrameAuth::Side::Client);
  return true;
}

std::unique_ptr<StoreClient> DdpStoreClient::clone() const {
  return std::make_unique<DdpStoreClient>(host_, port_, token_, timeout_, job_id_);
}

std::string DdpStoreClient::where() const { return host_ + ":" + std::to_string(port_); }

std::string DdpStoreClient::roundtrip(const std::string& frame, const std::string& what,
                                      std::chrono::milliseconds wait_ms) {
  DDP_CHECK(socket_.valid(), "store ", what, ": the connection to ", where(),
            " was lost by an earlier failure");
  const std::string sealed = auth_.seal(frame);  // a request too large fails here, before anything is sent
  try {
    net::send_all(socket_.fd(), sealed.data(), sealed.size(), "store " + where());
  } catch (const Error&) {
    socket_.close();  // a frame half sent leaves the stream out of step
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
  if (!auth_.open(body)) {
    socket_.close();
    DDP_FAIL(
        "store ", what, ": the reply from ", where(),
        " failed its authentication tag (altered, injected or replayed on the way: something between this "
        "process and the store tampers with the connection); the connection is closed and the reply was "
        "not used");
  }
  DDP_CHECK(!body.empty(), "store ", what, ": empty reply from ", where());
  if (static_cast<Status>(body[0]) == Status::Error) {
    proto::Reader in(body);
    in.u8();
    DDP_FAIL("store ", what, ": ", in.str());
  }
  return body;
}

void DdpStoreClient::set(const std::string& key, const std::string& value) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Set)).str(key).str(value);
  roundtrip(w.frame(), "set '" + key + "'", std::chrono::milliseconds(0));
}

std::optional<std::string> DdpStoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Get)).str(key).i64(wire_ms(timeout));
  std::string body = roundtrip(w.frame(), "get '" + key + "'", timeout);
  proto::Reader in(body);
  if (static_cast<Status>(in.u8()) != Status::Ok) return std::nullopt;
  return in.str();
}

std::optional<std::string> DdpStoreClient::try_get(const std::string& key) {
  return get(key, std::chrono::milliseconds(0));
}

int64_t DdpStoreClient::add(const std::string& key, int64_t delta) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Add)).str(key).i64(delta);
  std::string body = roundtrip(w.frame(), "add '" + key + "'", std::chrono::milliseconds(0));
  proto::Reader in(body);
  in.u8();
  return in.i64();
}

std::vector<std::string> DdpStoreClient::wait(const std::vector<std::string>& keys,
                                              std::chrono::milliseconds timeout) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Wait)).u32(static_cast<uint32_t>(keys.size()));
  for (auto& k : keys) w.str(k);
  w.i64(wire_ms(timeout));
  std::string body = roundtrip(w.frame(), "wait", timeout);
  proto::Reader in(body);
  if (static_cast<Status>(in.u8()) == Status::Ok) return {};
  std::vector<std::string> missing(in.u32());
  for (auto& k : missing) k = in.str();
  return missing;
}

std::string DdpStoreClient::compare_set(const std::string& key, const std::string& expected,
                                        const std::string& desired) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::CompareSet)).str(key).str(expected).str(desired);
  std::string body = roundtrip(w.frame(), "compare_set '" + key + "'", std::chrono::milliseconds(0));
  proto::Reader in(body);
  in.u8();
  return in.str();
}

bool DdpStoreClient::delete_key(const std::string& key) {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::Delete)).str(key);
  std::string body = roundtrip(w.frame(), "delete_key '" + key + "'", std::chrono::milliseconds(0));
  proto::Reader in(body);
  in.u8();
  return in.u8() != 0;
}

int64_t DdpStoreClient::num_keys() {
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::NumKeys));
  std::string body = roundtrip(w.frame(), "num_keys", std::chrono::milliseconds(0));
  proto::Reader in(body);
  in.u8();
  return in.i64();
}

}  // namespace ddp::dist
