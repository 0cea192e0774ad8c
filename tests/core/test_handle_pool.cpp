// test_handle_pool.cpp - the lifetime of the per-thread library handles (runtime/core/handle_pool.h, used for
// cuBLAS and cuDNN by core/cuda/handles.cpp), with fake handles: threads that come and go reuse the handles
// of threads that exited (one per device per concurrent thread, not one per thread ever), no handle is held
// by two threads at once, shutdown destroys every handle exactly once with its own device, and a handle a
// live thread still holds is destroyed when that thread exits, never while in use. Before the fix a thread's
// handles were never given back: 20 threads made 20 handles and none was destroyed.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/handle_pool.h"

using namespace ddp;

namespace {
// A fake handle: its device and a serial number; the world records what is alive and in use.
struct Fake {
  int device = -1;
  int serial = -1;
  bool operator<(const Fake& o) const { return serial < o.serial; }
};
struct World {
  std::mutex mu;
  int next = 0;
  std::set<int> alive, in_use;
  std::vector<std::string> errors;
  void error(const std::string& s) {
    std::lock_guard<std::mutex> g(mu);
    errors.push_back(s);
  }
};

std::shared_ptr<HandlePool<Fake>> make_pool(World& w) {
  return std::make_shared<HandlePool<Fake>>(
      [&w](int device) {
        std::lock_guard<std::mutex> g(w.mu);
        Fake f{device, w.next++};
        w.alive.insert(f.serial);
        return f;
      },
      [&w](int device, Fake f) {
        std::lock_guard<std::mutex> g(w.mu);
        if (f.device != device) w.errors.push_back("handle destroyed with another device current");
        if (w.in_use.count(f.serial)) w.errors.push_back("handle destroyed while a thread uses it");
        if (!w.alive.erase(f.serial)) w.errors.push_back("handle destroyed twice");
      });
}

// What a thread does with its handles: uses one per device, marking it in use while it runs.
void use_handles(World& w, ThreadHandles<Fake>& mine, int device) {
  Fake f = mine.get(device);
  std::lock_guard<std::mutex> g(w.mu);
  if (f.device != device) w.errors.push_back("got a handle of another device");
  w.in_use.insert(f.serial);  // stays in use until the thread exits (released below)
}
void thread_body(World& w, const std::shared_ptr<HandlePool<Fake>>& pool, const std::vector<int>& devices,
                 std::barrier<>* meet = nullptr) {
  std::vector<int> used;
  {
    ThreadHandles<Fake> mine(pool);
    for (int d : devices) {
      use_handles(w, mine, d);
      used.push_back(mine.get(d).serial);
    }
    if (meet) meet->arrive_and_wait();  // all threads hold their handles at once
    std::lock_guard<std::mutex> g(w.mu);
    for (int s : used)
      if (!w.in_use.erase(s)) w.errors.push_back("a handle was held by two threads at once");
  }  // ~ThreadHandles: the thread's exit
}
}  // namespace

TEST(HandlePool, ThreadsThatComeAndGoReuseHandlesAndShutdownDestroysEachOnce) {
  World w;
  auto pool = make_pool(w);
  for (int t = 0; t < 20; ++t) std::thread([&] { thread_body(w, pool, {0, 1}); }).join();
  EXPECT_EQ(pool->created(), 2u) << "one handle per device for threads that never overlap";
  std::barrier<> meet(4);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) ts.emplace_back([&] { thread_body(w, pool, {0, 1}, &meet); });
  for (auto& t : ts) t.join();
  EXPECT_EQ(pool->created(), 8u) << "one per device per concurrent thread";
  EXPECT_EQ(pool->free_handles(), 8u);
  pool->shutdown();
  EXPECT_EQ(pool->destroyed(), pool->created());
  EXPECT_TRUE(w.alive.empty()) << w.alive.size() << " handles never destroyed";
  for (const auto& e : w.errors) ADD_FAILURE() << e;
}

TEST(HandlePool, AHandleInUseAtShutdownIsDestroyedWhenItsThreadExits) {
  World w;
  auto pool = make_pool(w);
  std::barrier<> took(2), shut(2);
  std::thread late([&] {
    ThreadHandles<Fake> mine(pool);
    use_handles(w, mine, 3);
    took.arrive_and_wait();
    shut.arrive_and_wait();  // the pool shuts down while this thread still holds its handle
    std::lock_guard<std::mutex> g(w.mu);
    w.in_use.clear();
  });
  took.arrive_and_wait();
  pool->shutdown();
  EXPECT_EQ(w.alive.size(), 1u) << "the handle in use was destroyed under its thread";
  shut.arrive_and_wait();
  late.join();
  EXPECT_TRUE(w.alive.empty()) << "the handle given back after shutdown was not destroyed";
  EXPECT_EQ(pool->destroyed(), 1u);
  for (const auto& e : w.errors) ADD_FAILURE() << e;
}

TEST(HandlePool, DestroyFreeKeepsThePoolOpen) {
  World w;
  auto pool = make_pool(w);
  std::thread([&] { thread_body(w, pool, {0}); }).join();
  pool->destroy_free();
  EXPECT_TRUE(w.alive.empty());
  std::thread([&] { thread_body(w, pool, {0}); }).join();  // a new handle, given back to the open pool
  EXPECT_EQ(pool->created(), 2u);
  EXPECT_EQ(pool->free_handles(), 1u);
  pool.reset();  // the pool's destructor shuts it down
  EXPECT_TRUE(w.alive.empty());
  for (const auto& e : w.errors) ADD_FAILURE() << e;
}
