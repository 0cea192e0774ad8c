// cpu_allocator.h - the caching allocator behind CPU tensor storage. Blocks are rounded up to size classes
// (quarter steps between powers of two: at most 25% slack) and a freed block goes to its class's free list
// instead of back to the C library, so a training loop whose steps allocate the same sizes reuses the same
// pages every step: no mmap/munmap, no page faults, no zeroing by the kernel in the steady state.
//
// The free lists hold at most DDP_CPU_CACHE_MB MiB (default 2048; 0 turns caching off); a block freed beyond
// that goes straight back to the system. ASan builds do not cache (it would hide use-after-free).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ddp {

struct CpuAllocatorStats {
  uint64_t allocations = 0;         // calls that asked for memory
  uint64_t cache_hits = 0;          // of those, served from a free list
  uint64_t system_allocations = 0;  // of those, served by aligned_alloc
  size_t cached_bytes = 0;          // bytes now sitting in the free lists
};

// 64-byte aligned block of at least nbytes (nbytes > 0); throws ddp::Error when the system is out of memory.
void* cpu_allocate(size_t nbytes);
// Returns a block from cpu_allocate; nbytes must be the size it was allocated with.
void cpu_free(void* p, size_t nbytes);
// The size class a request of nbytes is rounded up to.
size_t cpu_size_class(size_t nbytes);
CpuAllocatorStats cpu_allocator_stats();
// Gives every cached block back to the system.
void cpu_release_cached_memory();
// Changes the cache limit (bytes; 0 disables caching and releases the cache). Returns the previous limit.
size_t cpu_set_cache_limit(size_t bytes);

}  // namespace ddp
