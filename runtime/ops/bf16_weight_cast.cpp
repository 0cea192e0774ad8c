// bf16_weight_cast.cpp - the per-thread cache of bf16 weight copies (bf16_weight_cast.h).
#include "runtime/ops/bf16_weight_cast.h"

#include <atomic>
#include <map>
#include <tuple>

#include "runtime/core/env_number.h"
#include "runtime/ops/mixed_precision.h"

namespace ddp::ops {

// A weight's identity: its storage, element offset and shape (two views of one storage are two weights).
// The storage pointer alone could name a new storage at a freed one's address, so each entry also keeps a
// weak reference to the storage it was made from and is used only while that storage is the one named.
struct Bf16WeightCast::Cache {
  using Key = std::tuple<const Storage*, int64_t, Shape>;
  struct Copy {
    std::weak_ptr<Storage> source;
    Tensor bf16;
  };
  std::map<Key, Copy> copies;
};

namespace {
thread_local Bf16WeightCast::Cache* t_cache = nullptr;
std::atomic<int64_t> g_casts{0};

Tensor counted_cast(const Tensor& w) {
  g_casts.fetch_add(1, std::memory_order_relaxed);
  return to_bf16(w);
}

bool same_storage(const std::weak_ptr<Storage>& cached, const std::shared_ptr<Storage>& now) {
  return !cached.expired() && !cached.owner_before(now) && !now.owner_before(cached);
}

// DDP_BF16_WEIGHT_CACHE=0: every scope converts on every use, as before the once-per-step cast (the reference the
// cast's tests compare with; the results are bitwise the same either way). Read as each scope opens (one getenv a
// step), so a test can run both ways in one process.
bool weight_cache_wanted() {
  const auto v = integer_from_env("DDP_BF16_WEIGHT_CACHE", 0, 1, "0 (convert on every use) or 1 (once per step)");
  return !v || *v == 1;
}
}  // namespace

Bf16WeightCast::Bf16WeightCast(bool on)
    : cache_(on && weight_cache_wanted() ? std::make_unique<Cache>() : nullptr), outer_(t_cache) {
  t_cache = cache_.get();
}
Bf16WeightCast::~Bf16WeightCast() { t_cache = outer_; }

bool bf16_weight_cast_active() { return t_cache != nullptr; }

Tensor bf16_weight(const Tensor& w) {
  const bool cacheable = t_cache && w.defined() && w.storage() && w.is_leaf() && w.requires_grad();
  if (!cacheable) return counted_cast(w);
  Bf16WeightCast::Cache::Key key{w.storage().get(), w.impl()->offset, w.shape()};
  auto it = t_cache->copies.find(key);
  if (it != t_cache->copies.end() && same_storage(it->second.source, w.storage())) return it->second.bf16;
  Tensor copy = counted_cast(w);
  t_cache->copies[std::move(key)] = {w.storage(), copy};
  return copy;
}

void check_no_bf16_weight_cast(const char* who) {
  DDP_CHECK(
      t_cache == nullptr, who,
      ": called inside an open ops::Bf16WeightCast scope on this thread; the scope holds bf16 copies of "
      "the weights this step would change. Close the scope (end its block) before the optimizer step: "
      "it spans the forward and backward passes of one step only (runtime/ops/bf16_weight_cast.h)");
}

namespace detail {
int64_t bf16_weight_casts() { return g_casts.load(std::memory_order_relaxed); }
}  // namespace detail

}  // namespace ddp::ops
