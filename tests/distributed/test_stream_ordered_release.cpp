// test_stream_ordered_release.cpp - the GPU collectives' buffer bookkeeping
// (runtime/distributed/stream_ordered_release.h), on the CPU with a fake stream-ordered allocator: ZeRO-3's
// gather -> use -> reshard of several units within one watchdog tick (50 ms; a GPU step does dozens). The
// pool's footprint must follow the memory account (one unit at a time, not every unit until the watchdog
// next looks), and every buffer freed while its collective may still run must have recorded the
// collective's stream (its free waits for it). Before the fix every keepalive was held until the watchdog
// saw the completion.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "runtime/distributed/stream_ordered_release.h"

using namespace ddp;
using namespace ddp::dist;

namespace {

// A stream-ordered pool (cudaMallocAsync / cudaFreeAsync): a free queued on the allocation's stream makes the
// bytes reusable by later allocations in that stream's order, so the footprint drops at the free call.
struct FakePool {
  int64_t live = 0, peak = 0;
  bool collective_running = false;  // the comm stream's collective has not finished on the fake GPU
  void* comm_stream = reinterpret_cast<void*>(0xC0);
  std::vector<std::string> unsafe;  // frees that did not wait for a collective still using the memory
};

// A Storage of the CUDA allocator: records the streams that use it; its free waits for them.
struct FakeStorage {
  FakePool* pool;
  int64_t bytes;
  std::vector<void*> used_on;
  FakeStorage(FakePool* p, int64_t b) : pool(p), bytes(b) {
    pool->live += bytes;
    pool->peak = std::max(pool->peak, pool->live);
  }
  ~FakeStorage() {
    if (pool->collective_running &&
        std::find(used_on.begin(), used_on.end(), pool->comm_stream) == used_on.end())
      pool->unsafe.push_back("a " + std::to_string(bytes) +
                             " B block freed without waiting for the comm stream");
    pool->live -= bytes;
  }
};

CommBuffer buffer_of(const std::shared_ptr<FakeStorage>& s, bool stream_ordered) {
  CommBuffer b{reinterpret_cast<void*>(0x1000), s->bytes / 4, DType::F32, Device::cuda(0), s, nullptr};
  if (stream_ordered) {
    FakeStorage* raw = s.get();
    b.record_stream = [raw](void* stream) { raw->used_on.push_back(stream); };
  }
  return b;
}

}  // namespace

TEST(StreamOrderedRelease, GatheredUnitsLeaveThePoolAtReshardNotAtTheWatchdogTick) {
  FakePool pool;
  const int64_t unit = 1 << 20;
  const int units = 8;
  int64_t account = 0, account_peak = 0;
  std::vector<HeldBuffers> pending;  // the Works the watchdog has not completed yet
  for (int u = 0; u < units; ++u) {
    auto gathered = std::make_shared<FakeStorage>(&pool, unit);  // ShardedDataParallel's unit_needed
    account += unit;
    account_peak = std::max(account_peak, account);
    // The all-gather into it is queued on the comm stream; the caller's stream waits for it, uses the unit.
    pool.collective_running = true;
    CommBuffer b = buffer_of(gathered, true);
    pending.push_back(hold_until_stream_done(b, b, pool.comm_stream));
    b = {};
    gathered.reset();  // reshard: the last user drops the unit
    account -= unit;
    EXPECT_EQ(pool.live, account) << "unit " << u << ": the pool still holds memory the account released";
  }
  EXPECT_EQ(pool.peak, account_peak) << "the GPU's peak (" << pool.peak
                                     << " B) exceeds the memory account's (" << account_peak
                                     << " B): gathered units outlived their reshard";
  EXPECT_TRUE(pool.unsafe.empty()) << pool.unsafe.front();
  pool.collective_running = false;  // the watchdog's tick: every collective completed
  pending.clear();
  EXPECT_EQ(pool.live, 0);
}

TEST(StreamOrderedRelease, FreesWhileTheCollectiveRunsWaitForItsStream) {
  FakePool pool;
  pool.collective_running = true;
  auto in = std::make_shared<FakeStorage>(&pool, 256);
  auto out = std::make_shared<FakeStorage>(&pool, 1024);
  HeldBuffers held = hold_until_stream_done(buffer_of(in, true), buffer_of(out, true), pool.comm_stream);
  EXPECT_TRUE(held.empty());
  in.reset();
  out.reset();
  EXPECT_EQ(pool.live, 0);
  EXPECT_TRUE(pool.unsafe.empty()) << pool.unsafe.front();
}

TEST(StreamOrderedRelease, MemoryThatCannotRecordAStreamIsHeldUntilCompletion) {
  FakePool pool;
  pool.collective_running = true;
  auto owned_elsewhere = std::make_shared<FakeStorage>(&pool, 512);  // e.g. Storage::wrap memory
  HeldBuffers held;
  {
    CommBuffer b = buffer_of(owned_elsewhere, false);
    held = hold_until_stream_done(b, b, pool.comm_stream);
  }
  owned_elsewhere.reset();
  EXPECT_EQ(pool.live, 512) << "released while the collective may still use it";
  pool.collective_running = false;
  held.clear();  // the watchdog saw the completion
  EXPECT_EQ(pool.live, 0);
  EXPECT_TRUE(pool.unsafe.empty());
}

TEST(StreamOrderedRelease, RawBuffersHoldNothing) {
  float x[4];
  CommBuffer b = comm_buffer(x, 4, Device::cuda(0));
  EXPECT_TRUE(hold_until_stream_done(b, b, nullptr).empty());
}
