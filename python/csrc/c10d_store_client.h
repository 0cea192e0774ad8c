// c10d_store_client.h - ddp.cpp's StoreClient over the c10d::Store that torch.distributed hands a backend
// (already prefixed for its group), so the shm group rendezvouses through PyTorch's own store: no second
// server, no port of our own.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "runtime/distributed/store_client.h"

namespace ddp_torch {

class C10dStoreClient : public ddp::dist::StoreClient {
 public:
  explicit C10dStoreClient(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  std::unique_ptr<ddp::dist::StoreClient> clone() const override;
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
  std::string describe() const override { return "the c10d store torch.distributed gave the ddpcpp backend"; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace ddp_torch
