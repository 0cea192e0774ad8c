// fake_torch_store.h - a small in-test stand-in for PyTorch's c10d TCPStore server, for testing our client
// without Python: the 1.13 protocol, or 2.x with the VALIDATE handshake (a first message that is not
// VALIDATE is dropped like the legacy 2.x server does, or ignored like the libuv one). Written from the
// protocol facts in docs/launcher.md; it records every key it sees.
#pragma once
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "runtime/distributed/socket_io.h"

namespace ddp::testing {

class FakeTorchStore {
 public:
  enum class Version { V1, V2Legacy, V2LibUv };

  explicit FakeTorchStore(Version v) : version_(v), listener_(dist::net::listen_on("127.0.0.1", 0)) {
    port_ = dist::net::local_port(listener_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FakeTorchStore() {
    stop_ = true;
    listener_.shutdown();
    acceptor_.join();
    {
      std::lock_guard<std::mutex> g(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : threads_) t.join();
  }
  int port() const { return port_; }
  std::set<std::string> keys_seen() {
    std::lock_guard<std::mutex> g(mu_);
    return seen_;
  }
  std::map<std::string, std::string> data() {
    std::lock_guard<std::mutex> g(mu_);
    return data_;
  }
  int connections() const { return connections_; }

 private:
  struct Closed {};
  // Blocking reads of the request fields (host byte order, as PyTorch).
  static void read(int fd, void* p, size_t n) {
    if (dist::net::recv_exact(fd, p, n, dist::net::Clock::time_point::max()) != dist::net::RecvResult::Ok)
      throw Closed{};
  }
  template <class T>
  static T get(int fd) {
    T v;
    read(fd, &v, sizeof(T));
    return v;
  }
  static std::string str(int fd) {
    uint64_t n = get<uint64_t>(fd);
    if (n > (1u << 20)) throw Closed{};
    std::string s(n, '\0');
    read(fd, s.data(), n);
    return s;
  }
  template <class T>
  static void put(int fd, T v) {
    dist::net::send_all(fd, &v, sizeof(T), "client");
  }
  static void put_str(int fd, const std::string& s) {
    put<uint64_t>(fd, s.size());
    dist::net::send_all(fd, s.data(), s.size(), "client");
  }

  void accept_loop() {
    while (!stop_) {
      int fd = ::accept(listener_.fd(), nullptr, nullptr);
      if (fd < 0) return;
      connections_++;
      std::lock_guard<std::mutex> g(mu_);
      fds_.push_back(fd);
      threads_.emplace_back([this, fd] {
        try {
          serve(fd);
        } catch (...) {
        }
        ::shutdown(fd, SHUT_RDWR);
      });
    }
  }

  // Command numbers of this version.
  int cmd(int v1_code) const { return version_ == Version::V1 ? v1_code : v1_code + 1; }

  void serve(int fd) {
    const bool v2 = version_ != Version::V1;
    if (v2) {
      uint8_t first = get<uint8_t>(fd);
      if (first != 0 || get<uint32_t>(fd) != 0x3C85F7CE) {
        if (version_ == Version::V2Legacy) return;                                  // drop
        while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // libuv: never answers
        return;
      }
    }
    for (;;) {
      const int c = get<uint8_t>(fd);
      std::unique_lock<std::mutex> g(mu_, std::defer_lock);
      if (c == cmd(0)) {  // SET
        std::string k = str(fd), v = str(fd);
        g.lock();
        seen_.insert(k);
        data_[k] = v;
        changed_.notify_all();
      } else if (c == cmd(1)) {  // COMPARE_SET
        std::string k = str(fd), expected = str(fd), desired = str(fd);
        g.lock();
        seen_.insert(k);
        auto it = data_.find(k);
        std::string reply;
        if (it == data_.end()) {
          if (expected.empty()) data_[k] = desired;
          reply = expected.empty() ? desired : expected;  // PyTorch "lies" with expected
        } else {
          if (it->second == expected) it->second = desired;
          reply = it->second;
        }
        g.unlock();
        put_str(fd, reply);
      } else if (c == cmd(2)) {  // GET: a missing key drops the connection
        std::string k = str(fd);
        g.lock();
        seen_.insert(k);
        auto it = data_.find(k);
        if (it == data_.end()) return;
        std::string v = it->second;
        g.unlock();
        put_str(fd, v);
      } else if (c == cmd(3)) {  // ADD: ASCII decimal
        std::string k = str(fd);
        int64_t d = get<int64_t>(fd);
        g.lock();
        seen_.insert(k);
        int64_t v = data_.count(k) ? std::stoll(data_[k]) : 0;  // non-numeric throws: connection dropped
        v += d;
        data_[k] = std::to_string(v);
        changed_.notify_all();
        g.unlock();
        put<int64_t>(fd, v);
      } else if (c == cmd(4) || c == cmd(5)) {  // CHECK, WAIT
        uint64_t n = get<uint64_t>(fd);
        std::vector<std::string> keys;
        for (uint64_t i = 0; i < n; ++i) keys.push_back(str(fd));
        auto all = [&] {
          for (auto& k : keys)
            if (!data_.count(k)) return false;
          return true;
        };
        g.lock();
        for (auto& k : keys) seen_.insert(k);
        if (c == cmd(4)) {
          uint8_t r = all() ? 0 : 1;
          g.unlock();
          put<uint8_t>(fd, r);
          continue;
        }
        bool canceled = false;
        while (!all() && !stop_) {
          changed_.wait_for(g, std::chrono::milliseconds(10));
          if (!v2) continue;
          pollfd p{fd, POLLIN, 0};
          if (::poll(&p, 1, 0) > 0) {  // 2.x: CANCEL_WAIT (12) may arrive while waiting
            g.unlock();
            uint8_t b = get<uint8_t>(fd);
            if (b != 12) return;
            canceled = true;
            g.lock();
            break;
          }
        }
        g.unlock();
        put<uint8_t>(fd, canceled ? 1 : 0);  // WAIT_CANCELED : STOP_WAITING
      } else if (c == cmd(6)) {              // GETNUMKEYS
        g.lock();
        int64_t n = static_cast<int64_t>(data_.size());
        g.unlock();
        put<int64_t>(fd, n);
      } else if (c == 8) {  // DELETE_KEY
        std::string k = str(fd);
        g.lock();
        int64_t erased = static_cast<int64_t>(data_.erase(k));
        g.unlock();
        put<int64_t>(fd, erased);
      } else if (v2 && c == 12) {  // CANCEL_WAIT outside a wait
        put<uint8_t>(fd, 1);
      } else if (v2 && c == 13) {  // PING
        put<uint32_t>(fd, get<uint32_t>(fd));
      } else {
        return;  // unknown command: drop
      }
    }
  }

  Version version_;
  dist::net::Socket listener_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
  std::set<std::string> seen_;
  std::vector<int> fds_;
  std::list<std::thread> threads_;
};

}  // namespace ddp::testing
