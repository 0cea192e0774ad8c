// gloo_store.h - Gloo's rendezvous Store interface on top of our Store client, with a key prefix so several
// groups (and several Gloo contexts) can share one store. Used only while a Gloo context connects its mesh.
#pragma once
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/distributed/store.h"

namespace ddp::dist {

class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<dist::Store> store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_->get(prefix_ + key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (auto& k : keys) full.push_back(prefix_ + k);
    store_->wait(full, timeout);
  }

 private:
  std::shared_ptr<dist::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ddp::dist
