// socket_io.cpp - POSIX sockets behind the store: every wait is a poll() bounded by a deadline.
#include "runtime/distributed/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/core/error.h"

namespace ddp::dist::net {

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  auto now = Clock::now();
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now))
    return Clock::time_point::max();
  return now + timeout;
}

namespace {
int ms_until(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

void resolve(const std::string& host, int port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const char* node = (host.empty() || (passive && host == "0.0.0.0")) ? nullptr : host.c_str();
  if (passive && node == nullptr) hints.ai_family = AF_INET;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(node, service.c_str(), &hints, &out.list);
  DDP_CHECK(rc == 0, "cannot resolve store address '", host, ":", port, "': ", gai_strerror(rc),
            "; check MASTER_ADDR");
}

// One non-blocking connect attempt bounded by the deadline; returns the connected socket or an errno.
Socket try_connect(const addrinfo* ai, Clock::time_point deadline, int& err) {
  Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
  if (!s.valid()) {
    err = errno;
    return {};
  }
  int flags = fcntl(s.fd(), F_GETFL, 0);
  fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK);
  if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
      return {};
    }
    pollfd p{s.fd(), POLLOUT, 0};
    int wait_ms = std::min(ms_until(deadline) < 0 ? 1000 : ms_until(deadline), 5000);
    int rc = ::poll(&p, 1, wait_ms);
    if (rc <= 0) {
      err = rc == 0 ? ETIMEDOUT : errno;
      return {};
    }
    socklen_t len = sizeof(err);
    getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return {};
  }
  fcntl(s.fd(), F_SETFL, flags);
  err = 0;
  return s;
}
}  // namespace

Socket connect_with_retry(const std::string& host, int port, Clock::time_point deadline) {
  int last_err = 0;
  std::string last_what;
  auto backoff = std::chrono::milliseconds(10);
  while (true) {
    try {
      AddrInfo ai;
      resolve(host, port, false, ai);
      for (addrinfo* p = ai.list; p; p = p->ai_next) {
        Socket s = try_connect(p, deadline, last_err);
        if (s.valid()) {
          set_nodelay(s.fd());
          return s;
        }
      }
      last_what = std::strerror(last_err);
    } catch (const Error& e) {
      last_what = e.what();  // the name may become resolvable later (DNS of a starting node)
    }
    if (Clock::now() + backoff >= deadline)
      DDP_FAIL("cannot connect to the store at ", host, ":", port, " before the timeout: ", last_what,
               "; check MASTER_ADDR/MASTER_PORT and that rank 0 (or the launcher) is running");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

Socket listen_on(const std::string& host, int port, int backlog) {
  DDP_CHECK(port >= 0 && port <= 65535, "store port ", port, " is out of range: expected 0..65535");
  AddrInfo ai;
  resolve(host, port, true, ai);
  int last_err = 0;
  for (addrinfo* p = ai.list; p; p = p->ai_next) {
    Socket s(::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol));
    if (!s.valid()) {
      last_err = errno;
      continue;
    }
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), p->ai_addr, p->ai_addrlen) == 0 && ::listen(s.fd(), backlog) == 0) return s;
    last_err = errno;
  }
  DDP_FAIL(
      "store server cannot listen on ", host.empty() ? "*" : host, ":", port, ": ", std::strerror(last_err),
      port != 0 ? " (is the port in use? pick another MASTER_PORT - ddprun --master-port N - or let ddprun "
                  "choose a free one: ddprun --standalone, or --master-port 0)"
                : "");
}

int local_port(const Socket& s) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  DDP_CHECK(getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) == 0,
            "getsockname failed: ", std::strerror(errno));
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

void send_all(int fd, const void* data, size_t len, const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    DDP_CHECK(n > 0, "sending to ", peer, " failed: ", std::strerror(errno));
    p += n;
    len -= static_cast<size_t>(n);
  }
}

RecvResult recv_exact(int fd, void* data, size_t len, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, ms_until(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) return RecvResult::TimedOut;
    if (rc < 0) return RecvResult::Closed;
    ssize_t n = ::recv(fd, p, len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return RecvResult::Closed;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return RecvResult::Ok;
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string local_address_towards(const std::string& host) {
  if (host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" || resolves_to_loopback(host))
    return "127.0.0.1";
  AddrInfo ai;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &ai.list);
  DDP_CHECK(rc == 0, "cannot resolve '", host, "': ", gai_strerror(rc), "; check MASTER_ADDR");
  for (addrinfo* p = ai.list; p; p = p->ai_next) {
    Socket s(::socket(p->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!s.valid() || ::connect(s.fd(), p->ai_addr, p->ai_addrlen) != 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    const void* src = addr.ss_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr);
    if (inet_ntop(addr.ss_family, src, buf, sizeof(buf))) return buf;
  }
  DDP_FAIL("no local address routes to '", host, "'; set GLOO_SOCKET_IFNAME to the network interface to use");
}

bool resolves_to_loopback(const std::string& host) {
  AddrInfo ai;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &ai.list) != 0) return false;
  bool any = false;
  for (addrinfo* p = ai.list; p; p = p->ai_next) {
    bool loop = false;
    if (p->ai_family == AF_INET)
      loop = (ntohl(reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    else if (p->ai_family == AF_INET6)
      loop = IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr);
    if (!loop) return false;
    any = true;
  }
  return any;
}

}  // namespace ddp::dist::net
