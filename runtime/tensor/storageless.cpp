// storageless.cpp - the table of reasons behind storageless.h: a mutex and a map keyed by the tensor's
// address, each entry holding the tensor weakly (a new tensor at a dead one's address gets no stale reason).
#include "runtime/tensor/storageless.h"

#include <mutex>
#include <unordered_map>

#include "runtime/tensor/tensor.h"

namespace ddp {

namespace {
struct Entry {
  std::weak_ptr<TensorImpl> tensor;
  std::string why;
};
std::mutex& table_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const TensorImpl*, Entry>& table() {
  static std::unordered_map<const TensorImpl*, Entry> t;
  return t;
}
}  // namespace

void release_storage(Tensor& t) {
  t.impl()->device_at_rest = t.device();
  t.impl()->storage = nullptr;
}

void set_storageless_reason(const std::shared_ptr<TensorImpl>& t, std::string why) {
  std::lock_guard<std::mutex> lock(table_mutex());
  auto& tab = table();
  std::erase_if(tab, [](const auto& e) { return e.second.tensor.expired(); });
  if (why.empty()) {
    tab.erase(t.get());
  } else {
    tab[t.get()] = {t, std::move(why)};
  }
}

std::string storageless_reason(const TensorImpl* t) {
  std::lock_guard<std::mutex> lock(table_mutex());
  auto it = table().find(t);
  if (it == table().end() || it->second.tensor.lock().get() != t) return "";
  return it->second.why;
}

}  // namespace ddp
