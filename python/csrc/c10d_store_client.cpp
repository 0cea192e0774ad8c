// c10d_store_client.cpp - each StoreClient call as the c10d::Store call it maps to; a c10d timeout becomes
// the "missing" answer ddp.cpp's Store turns into an error naming the key.
#include "c10d_store_client.h"

namespace ddp_torch {

namespace {
std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }
}  // namespace

std::unique_ptr<ddp::dist::StoreClient> C10dStoreClient::clone() const {
  // c10d stores serialize their calls; a clone of our own is only needed for a second connection, which
  // c10d::Store::clone gives where the store supports it (TCPStore); else the same store is shared.
  c10::intrusive_ptr<c10d::Store> s = store_;
  try {
    s = store_->clone();
  } catch (const std::exception&) {
  }
  return std::make_unique<C10dStoreClient>(s);
}

void C10dStoreClient::set(const std::string& key, const std::string& value) { store_->set(key, bytes(value)); }

std::optional<std::string> C10dStoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  if (!wait({key}, timeout).empty()) return std::nullopt;
  return text(store_->get(key));
}

std::optional<std::string> C10dStoreClient::try_get(const std::string& key) {
  if (!store_->check({key})) return std::nullopt;
  return text(store_->get(key));
}

int64_t C10dStoreClient::add(const std::string& key, int64_t delta) { return store_->add(key, delta); }

std::vector<std::string> C10dStoreClient::wait(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout) {
  try {
    store_->wait(keys, timeout);
    return {};
  } catch (const c10::DistStoreError&) {
  } catch (const c10::Error&) {
  }
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (!store_->check({k})) missing.push_back(k);
  return missing;
}

std::string C10dStoreClient::compare_set(const std::string& key, const std::string& expected,
                                         const std::string& desired) {
  return text(store_->compareSet(key, bytes(expected), bytes(desired)));
}

bool C10dStoreClient::delete_key(const std::string& key) { return store_->deleteKey(key); }

int64_t C10dStoreClient::num_keys() { return store_->getNumKeys(); }

}  // namespace ddp_torch
