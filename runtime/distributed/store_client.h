// store_client.h - what a store connection must do, whatever server it talks to: our own StoreServer
// (ddp_store_client.h) or PyTorch's c10d TCPStore hosted by torchrun's agent (torch_store_client.h).
// Store (store.h) owns one of these, adds the key namespace, the lock and the error messages that name keys.
// Implementations are not thread-safe; Store serializes calls.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp::dist {

class StoreClient {
 public:
  virtual ~StoreClient() = default;
  // A new, independent connection to the same server.
  virtual std::unique_ptr<StoreClient> clone() const = 0;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value once the key exists; nullopt when it did not appear within `timeout`.
  virtual std::optional<std::string> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // The value if the key exists now.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Adds delta to the decimal integer under key (absent = 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Waits until all keys exist; returns the keys still missing when `timeout` passed (empty: all there).
  virtual std::vector<std::string> wait(const std::vector<std::string>& keys,
                                        std::chrono::milliseconds timeout) = 0;
  // Stores desired if the value equals expected (absent counts as ""); returns the value afterwards ("" when
  // absent).
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;
  // "the store at host:port" / "PyTorch's TCPStore (1.13 protocol) at host:port", for messages.
  virtual std::string describe() const = 0;
};

}  // namespace ddp::dist
