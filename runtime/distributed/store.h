// store.h - the key-value store every rank shares (like c10d's Store): rendezvous, NCCL unique ids, arrival
// marks of collectives. Values are byte strings. Every call is bounded by a timeout (default 300 s) and its
// error names the key. Thread-safe: calls on one Store are serialized.
//
// Two servers can be behind it (store_client.h): our own StoreServer, hosted by rank 0 (authenticated with
// the run token), or PyTorch's c10d TCPStore that torchrun's agent hosts (TORCHELASTIC_USE_AGENT_STORE=True;
// no token: PyTorch's store has none). A key prefix keeps one run attempt's keys apart from another's.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/store_client.h"

namespace ddp::dist {

inline constexpr std::chrono::milliseconds kDefaultStoreTimeout = std::chrono::seconds(300);

enum class StoreKind { Ddp, Torch };
// Which c10d wire protocol to speak to PyTorch's store (docs/launcher.md): Auto probes the server.
enum class TorchProtocol { Auto, V1, V2 };

struct StoreAddress {
  StoreKind kind = StoreKind::Ddp;
  std::string host = "127.0.0.1";
  int port = 29500;
  std::string token;       // Ddp only: the run token
  std::string job_id;      // Ddp only: this launch's DDP_JOB_ID; a server of another job refuses it ("": unchecked)
  std::string key_prefix;  // prepended to every key (e.g. "ddp/<run id>/attempt_<n>/")
  TorchProtocol torch_protocol = TorchProtocol::Auto;
};

class Store {
 public:
  // Our own store at host:port: connects, retrying until `timeout` (the server may start later), then proves
  // the run token. A wrong token gives a ddp::Error at once.
  Store(std::string host, int port, std::string token,
        std::chrono::milliseconds timeout = kDefaultStoreTimeout);
  Store(const StoreAddress& address, std::chrono::milliseconds timeout = kDefaultStoreTimeout);
  // Over a client of any other server (the PyTorch backend's adapter of the c10d::Store it is given,
  // python/csrc/c10d_store_client.h); address() then says only kind Torch.
  Store(std::unique_ptr<StoreClient> client, std::chrono::milliseconds timeout);
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
  // Keys in the whole server (PyTorch's store also counts the agent's own keys and other prefixes).
  int64_t num_keys();

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  const std::string& host() const { return address_.host; }
  int port() const { return address_.port; }
  const StoreAddress& address() const { return address_; }
  // A counter of this client, used to give process groups created in the same order on every rank the same
  // key prefix ("pg0", "pg1", ...).
  uint64_t next_group_id() { return group_counter_++; }

 private:
  Store(const StoreAddress& address, std::chrono::milliseconds timeout, std::unique_ptr<StoreClient> client);
  std::string where() const;

  StoreAddress address_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::unique_ptr<StoreClient> client_;
  std::atomic<uint64_t> group_counter_{0};
};

}  // namespace ddp::dist
