// torch_store_client.h - a client of PyTorch's c10d TCPStore wire protocol, for running under torchrun or
// torch.distributed.launch, whose agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True). Written from
// the protocol facts in docs/launcher.md (read from PyTorch 1.13.1 and 2.6.0 sources): 1-byte command, u64
// length-prefixed keys and values in host byte order, every key prefixed with "/" as PyTorch's client does,
// ADD values stored as ASCII decimal. Two dialects:
//   V1 (PyTorch 1.13 and earlier 1.x): no handshake; SET=0 COMPARE_SET=1 GET=2 ADD=3 CHECK=4 WAIT=5
//       GETNUMKEYS=6 DELETE_KEY=8. A timed-out WAIT leaves the connection out of step: it is reopened.
//   V2 (PyTorch 2.x with the validation handshake): first VALIDATE(0) + u32 magic, then PING(13) + nonce
//       echoed; every command number is one higher; a timed-out WAIT is cancelled with CANCEL_WAIT(12).
// Auto probes with the V2 handshake, which every server answers at once: a 2.x server echoes the ping (the
// connection is kept), a 1.x server reads it as a SET with an impossible key length and closes the
// connection (the client reconnects in V1). Neither within the timeout is an error naming
// DDP_TORCH_STORE_PROTOCOL.
#pragma once
#include <chrono>
#include <string>

#include "runtime/distributed/socket_io.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_client.h"

namespace ddp::dist {

class TorchStoreClient : public StoreClient {
 public:
  TorchStoreClient(std::string host, int port, TorchProtocol protocol, std::chrono::milliseconds timeout);

  std::unique_ptr<StoreClient> clone() const override;
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::vector<std::string> wait(const std::vector<std::string>& keys,
                                std::chrono::milliseconds timeout) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  std::string describe() const override;

  // The dialect in use (V1 or V2 once connected).
  TorchProtocol protocol() const { return protocol_; }

 private:
  enum class Cmd {
    Validate,
    Set,
    CompareSet,
    Get,
    Add,
    Check,
    Wait,
    GetNumKeys,
    DeleteKey,
    CancelWait,
    Ping
  };
  uint8_t code(Cmd c) const;
  void open();
  // Sends VALIDATE + PING and checks the echo. probing: false (not an error) when the server closes the
  // connection, as a 1.x server does.
  bool handshake(bool probing);
  void check_echo(uint32_t echo, uint32_t nonce);
  // Connection helpers: every failure closes the socket (the next call reopens it) and throws naming `what`.
  void send(const std::string& bytes, const std::string& what);
  void recv(void* out, size_t n, net::Clock::time_point deadline, const std::string& what);
  uint8_t recv_u8(const std::string& what);
  int64_t recv_i64(const std::string& what);
  std::string recv_bytes(const std::string& what);
  bool check(const std::vector<std::string>& keys);
  // WAIT; true when all keys exist before the deadline.
  bool wait_keys(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  net::Clock::time_point reply_deadline() const;

  std::string host_;
  int port_;
  TorchProtocol protocol_;
  std::chrono::milliseconds timeout_;
  net::Socket socket_;
};

}  // namespace ddp::dist
