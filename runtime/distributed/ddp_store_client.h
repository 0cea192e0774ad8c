// ddp_store_client.h - the client of our own store server (store_server.h, protocol in store_protocol.h):
// one TCP connection, a challenge-response handshake that proves the run token without sending it, then
// one request at a time, each request and reply tagged with the session's key (store_frame_auth.h).
#pragma once
#include <chrono>
#include <string>

#include "runtime/distributed/socket_io.h"
#include "runtime/distributed/store_client.h"
#include "runtime/distributed/store_frame_auth.h"

namespace ddp::dist {

class DdpStoreClient : public StoreClient {
 public:
  // Connects (retrying until `timeout`: the server may start later) and authenticates. A server that cannot
  // prove it knows the token, or that refuses ours, gives a ddp::Error at once.
  // `job_id` (DDP_JOB_ID, "" for none) is shown to the server, which refuses a client of another job.
  DdpStoreClient(std::string host, int port, std::string token, std::chrono::milliseconds timeout,
                 std::string job_id = "");

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
  std::string describe() const override { return "the store at " + where(); }

 private:
  // False when the server closed the connection before its challenge (busy: try again).
  bool handshake();
  // Sends one request frame and reads the reply body; `wait_ms` is how long the server may hold the reply.
  std::string roundtrip(const std::string& frame, const std::string& what, std::chrono::milliseconds wait_ms);
  std::string where() const;

  std::string host_;
  std::string job_id_;
  int port_;
  std::string token_;
  std::chrono::milliseconds timeout_;
  net::Socket socket_;
  proto::FrameAuth auth_;  // off until the handshake is done
};

}  // namespace ddp::dist
