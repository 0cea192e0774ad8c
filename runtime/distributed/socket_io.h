// socket_io.h - blocking TCP helpers with deadlines for the store: connect with retry, send all, receive
// exactly n bytes. Errors are ddp::Error naming the peer; a clean close by the peer is reported as such, not
// thrown.
#pragma once
#include <chrono>
#include <cstddef>
#include <string>

namespace ddp::dist::net {

using Clock = std::chrono::steady_clock;

// Owns a socket file descriptor; closes it on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  // Wakes a thread blocked in recv/accept on this socket (shutdown(2)); the fd stays open.
  void shutdown();

 private:
  int fd_ = -1;
};

// Connects to host:port, retrying refused/unreachable attempts until the deadline (the server may start
// later). Throws ddp::Error naming host:port and the last error when the deadline passes.
Socket connect_with_retry(const std::string& host, int port, Clock::time_point deadline);

// Listens on host:port (port 0 picks a free port; host "" or "0.0.0.0" listens on all interfaces).
Socket listen_on(const std::string& host, int port, int backlog = 512);
// The local port a socket is bound to.
int local_port(const Socket& s);

// Sends all bytes (MSG_NOSIGNAL); throws ddp::Error on failure.
void send_all(int fd, const void* data, size_t len, const std::string& peer);

enum class RecvResult { Ok, Closed, TimedOut };
// Receives exactly len bytes; waits forever when deadline is Clock::time_point::max().
RecvResult recv_exact(int fd, void* data, size_t len, Clock::time_point deadline);

// Disables Nagle's algorithm: small request/reply messages go out at once.
void set_nodelay(int fd);

// Deadline `timeout` from now, saturating instead of overflowing for huge timeouts.
Clock::time_point deadline_after(std::chrono::milliseconds timeout);

}  // namespace ddp::dist::net

namespace ddp::dist::net {
// The local IP address this host uses to reach `host` (a UDP connect, nothing is sent); "127.0.0.1" for a
// loopback host. Throws ddp::Error when host cannot be resolved or routed.
std::string local_address_towards(const std::string& host);
// True when host resolves only to loopback addresses (127.0.0.0/8, ::1); false when unresolvable.
bool resolves_to_loopback(const std::string& host);
}  // namespace ddp::dist::net
