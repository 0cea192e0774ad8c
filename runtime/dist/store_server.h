// store_server.h - the key-value server behind Store (like c10d's TCPStore master), hosted by rank 0 or a
// launcher. One thread per connection; a client must present the run token first or it is dropped, and so is
// any client that sends malformed or oversized frames or closes mid-message - the server keeps serving
// others.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace ddp::dist {

class StoreServer {
 public:
  // Binds host:port and starts serving at once. Port 0 picks a free port (see port()). Host "" or "0.0.0.0"
  // listens on all interfaces. Clients must send exactly `token` (may be empty) in their hello.
  StoreServer(const std::string& host, int port, std::string token);
  // Stops serving: closes the listener and every connection, wakes blocked gets, joins all threads.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // Connections dropped for a bad token, a malformed or oversized message or a close mid-message.
  int64_t dropped_connections() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace ddp::dist
