// store.h - the client of the key-value store every rank shares (like c10d's TCPStore client): rendezvous,
// NCCL unique ids, arrival marks of collectives. Values are byte strings. Every call is bounded by a timeout
// (default 300 s) and its error names the key. Thread-safe: calls on one Store are serialized.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dist/socket_io.h"

namespace ddp::dist {

inline constexpr std::chrono::milliseconds kDefaultStoreTimeout = std::chrono::seconds(300);

class Store {
 public:
  // Connects to the server at host:port, retrying until `timeout` (the server may start later), then sends
  // the run token. A wrong token gives a ddp::Error at once.
  Store(std::string host, int port, std::string token,
        std::chrono::milliseconds timeout = kDefaultStoreTimeout);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // A second, independent connection to the same server (for a background thread of its own).
  std::shared_ptr<Store> clone() const;

  void set(const std::string& key, const std::string& value);
  // Blocks until the key exists or the timeout passes (then throws naming the key).
  std::string get(const std::string& key);
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // The value if the key exists now, without waiting.
  std::optional<std::string> try_get(const std::string& key);
  // Atomically adds delta to the integer under key (absent = 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Blocks until all keys exist; throws naming the missing keys on timeout.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Sets key to desired if its value equals expected (absent counts as equal to ""). Returns the value stored
  // under key afterwards ("" when absent).
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  // Removes key; true if it existed.
  bool delete_key(const std::string& key);
  int64_t num_keys();

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // A counter of this client, used to give process groups created in the same order on every rank the same
  // key prefix ("pg0", "pg1", ...).
  uint64_t next_group_id() { return group_counter_++; }

 private:
  // Sends one request frame and reads the reply body; `wait_ms` is how long the server may hold the reply.
  std::string roundtrip(const std::string& frame, const std::string& what, std::chrono::milliseconds wait_ms);
  std::string where() const;

  std::string host_;
  int port_;
  std::string token_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  net::Socket socket_;
  std::atomic<uint64_t> group_counter_{0};
};

}  // namespace ddp::dist
