// store.cpp - the Store front: picks the client for the server kind, namespaces keys, serializes calls and
// turns timeouts into errors that name the keys.
#include "runtime/distributed/store.h"

#include "runtime/core/error.h"
#include "runtime/distributed/ddp_store_client.h"
#include "runtime/distributed/torch_store_client.h"

namespace ddp::dist {

namespace {
std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s;
}

std::unique_ptr<StoreClient> connect(const StoreAddress& a, std::chrono::milliseconds timeout) {
  DDP_CHECK(a.port > 0 && a.port <= 65535, "store port ", a.port,
            " is out of range: expected 1..65535 (MASTER_PORT)");
  DDP_CHECK(timeout.count() > 0, "store timeout must be positive, got ", timeout.count(), " ms");
  if (a.kind == StoreKind::Torch)
    return std::make_unique<TorchStoreClient>(a.host, a.port, a.torch_protocol, timeout);
  return std::make_unique<DdpStoreClient>(a.host, a.port, a.token, timeout, a.job_id);
}

StoreAddress ddp_address(std::string host, int port, std::string token) {
  StoreAddress a;
  a.host = std::move(host);
  a.port = port;
  a.token = std::move(token);
  return a;
}
}  // namespace

Store::Store(std::string host, int port, std::string token, std::chrono::milliseconds timeout)
    : Store(ddp_address(std::move(host), port, std::move(token)), timeout) {}

Store::Store(const StoreAddress& address, std::chrono::milliseconds timeout)
    : Store(address, timeout, connect(address, timeout)) {}

Store::Store(const StoreAddress& address, std::chrono::milliseconds timeout,
             std::unique_ptr<StoreClient> client)
    : address_(address), timeout_(timeout), client_(std::move(client)) {}

Store::Store(std::unique_ptr<StoreClient> client, std::chrono::milliseconds timeout)
    : Store(StoreAddress{.kind = StoreKind::Torch}, timeout, std::move(client)) {
  DDP_CHECK(client_ != nullptr, "Store: the client is null; pass a connected StoreClient");
  DDP_CHECK(timeout.count() > 0, "store timeout must be positive, got ", timeout.count(), " ms");
}

Store::~Store() = default;

std::shared_ptr<Store> Store::clone() const {
  // The clone of a connected client keeps what the first connection learned (e.g. PyTorch's protocol).
  return std::shared_ptr<Store>(new Store(address_, timeout_, client_->clone()));
}

std::string Store::where() const { return client_->describe(); }

void Store::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> g(mu_);
  client_->set(address_.key_prefix + key, value);
}

std::string Store::get(const std::string& key) { return get(key, timeout_); }

std::string Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> g(mu_);
  auto v = client_->get(address_.key_prefix + key, timeout);
  DDP_CHECK(v.has_value(), "store get: key '", key, "' did not appear within ", timeout.count(), " ms (",
            where(), "); did every rank reach this point?");
  return *v;
}

std::optional<std::string> Store::try_get(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  return client_->try_get(address_.key_prefix + key);
}

int64_t Store::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> g(mu_);
  return client_->add(address_.key_prefix + key, delta);
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  for (auto& k : keys) full.push_back(address_.key_prefix + k);
  std::vector<std::string> missing;
  {
    std::lock_guard<std::mutex> g(mu_);
    missing = client_->wait(full, timeout);
  }
  if (missing.empty()) return;
  for (auto& k : missing)
    if (k.rfind(address_.key_prefix, 0) == 0) k = k.substr(address_.key_prefix.size());
  DDP_FAIL("store wait: key(s) ", join_keys(missing), " did not appear within ", timeout.count(), " ms (",
           where(), "); did every rank reach this point?");
}

std::string Store::compare_set(const std::string& key, const std::string& expected,
                               const std::string& desired) {
  std::lock_guard<std::mutex> g(mu_);
  return client_->compare_set(address_.key_prefix + key, expected, desired);
}

bool Store::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  return client_->delete_key(address_.key_prefix + key);
}

int64_t Store::num_keys() {
  std::lock_guard<std::mutex> g(mu_);
  return client_->num_keys();
}

}  // namespace ddp::dist
