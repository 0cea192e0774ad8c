// cpu_allocator.cpp - size-class free lists under one mutex (allocation is rare next to the work done on a
// block, and data-loader threads allocate too).
#include "runtime/tensor/cpu_allocator.h"

#include <bit>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/core/error.h"

namespace ddp {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizerBuild = true;
#else
constexpr bool kSanitizerBuild = false;
#endif

size_t default_limit() {
  if (kSanitizerBuild) return 0;
  const char* env = std::getenv("DDP_CPU_CACHE_MB");
  if (!env || !*env) return size_t{2048} << 20;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(env, &end, 10);
  DDP_CHECK(end && *end == '\0',
            "DDP_CPU_CACHE_MB must be a whole number of MiB (0 turns the cache off); got '", env, "'");
  return static_cast<size_t>(mb) << 20;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;  // size class -> free blocks
  size_t limit = default_limit();
  CpuAllocatorStats stats;

  void release_all_locked() {
    for (auto& [cls, blocks] : free_lists)
      for (void* p : blocks) std::free(p);
    free_lists.clear();
    stats.cached_bytes = 0;
  }
};

// Never destroyed: tensors that live in static objects may be freed after main returns.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

void* system_allocate(size_t cls) {
  void* p = std::aligned_alloc(64, cls);
  DDP_CHECK(p != nullptr, "out of host memory allocating ", cls, " bytes");
  return p;
}

}  // namespace

size_t cpu_size_class(size_t nbytes) {
  if (nbytes <= 256) return (nbytes + 63) / 64 * 64;
  // Quarter steps between powers of two: 256, 320, 384, 448, 512, 640, ...
  const int top = std::bit_width(nbytes - 1) - 1;  // 2^top < nbytes <= 2^(top+1)
  const size_t quarter = size_t{1} << (top - 2);
  return (nbytes + quarter - 1) / quarter * quarter;
}

void* cpu_allocate(size_t nbytes) {
  const size_t cls = cpu_size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    ++c.stats.allocations;
    auto it = c.free_lists.find(cls);
    if (it != c.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= cls;
      ++c.stats.cache_hits;
      return p;
    }
    ++c.stats.system_allocations;
  }
  return system_allocate(cls);
}

void cpu_free(void* p, size_t nbytes) {
  if (!p) return;
  const size_t cls = cpu_size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.stats.cached_bytes + cls <= c.limit) {
      c.free_lists[cls].push_back(p);
      c.stats.cached_bytes += cls;
      return;
    }
  }
  std::free(p);
}

CpuAllocatorStats cpu_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void cpu_release_cached_memory() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.release_all_locked();
}

size_t cpu_set_cache_limit(size_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  const size_t old = c.limit;
  c.limit = bytes;
  if (c.stats.cached_bytes > bytes) c.release_all_locked();
  return old;
}

}  // namespace ddp
