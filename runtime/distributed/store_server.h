// store_server.h - the key-value server behind Store (like c10d's TCPStore master), hosted by rank 0 or a
// launcher. One thread per connection; a client must prove it knows the run token first (a
// challenge-response, store_protocol.h) or it is dropped, and so is any client whose later frame fails its
// tag (store_frame_auth.h: altered, injected, replayed or reordered on the way), or that sends malformed or
// oversized frames or closes mid-message - the server keeps serving others. Before authentication a client
// can make the server hold at most kMaxHelloBytes for it, and only `max_unauthenticated` such connections
// exist at once.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ddp::dist {

struct StoreServerLimits {
  int max_unauthenticated = 64;  // connections still in their handshake (each has a thread and a 10 s timer)
  int max_connections = 8192;    // all connections (authenticated clients: a few per rank)
  std::chrono::milliseconds hello_timeout = std::chrono::seconds(10);
  // Called before each connection thread is created; tests make it throw std::system_error to see that a
  // failed thread creation drops that one connection and nothing else.
  std::function<void()> before_spawn;
};

class StoreServer {
 public:
  // Binds host:port and starts serving at once. Port 0 picks a free port (see port()). Host "" or "0.0.0.0"
  // listens on all IPv4 interfaces, "::" on all IPv6 ones. Clients must prove they know `token` (may be
  // empty). With a `job_id` (DDP_JOB_ID of the launch that started this server), a client that names another
  // job id is refused with a message saying so (two jobs on one port); "" on either side is not checked.
  StoreServer(const std::string& host, int port, std::string token, StoreServerLimits limits = {},
              std::string job_id = "");
  // Stops serving: closes the listener and every connection, wakes blocked gets, joins all threads.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // Connections dropped for a bad token, a malformed or oversized message or a close mid-message.
  int64_t dropped_connections() const;
  // Connections open now (authenticated or not), and warnings printed so far (they are rate-limited).
  int open_connections() const;
  int64_t warnings_printed() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace ddp::dist
