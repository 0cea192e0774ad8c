// handle_pool.h - library handles (cuBLAS, cuDNN) per device, shared by threads without leaking. A thread
// takes a handle of a device on first use (ThreadHandles) and gives it back to the pool when it exits; the
// next thread reuses it. So the number of handles is the most threads that used a device at once, not every
// thread that ever did - creating one costs milliseconds and device memory (cuBLAS's workspace), and
// destroying one synchronizes the device, so neither happens per thread.
// The pool destroys the handles it holds on shutdown() - at process teardown (core/cuda/handles.cpp), or in
// a test - each through `destroy` (which makes its device current). A handle a live thread still holds is
// destroyed when that thread gives it back after the shutdown, never while in use. Plain C++ (create and
// destroy are parameters), so the bookkeeping is tested on the CPU (tests/core/test_handle_pool.cpp).
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace ddp {

template <class Handle>
class HandlePool {
 public:
  using Create = std::function<Handle(int device)>;
  using Destroy = std::function<void(int device, Handle)>;
  HandlePool(Create create, Destroy destroy) : create_(std::move(create)), destroy_(std::move(destroy)) {}
  ~HandlePool() { shutdown(); }
  HandlePool(const HandlePool&) = delete;
  HandlePool& operator=(const HandlePool&) = delete;

  // A free handle of `device`, or a new one (created outside the lock).
  Handle take(int device) {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto& f = free_[device];
      if (!f.empty()) {
        Handle h = f.back();
        f.pop_back();
        return h;
      }
    }
    Handle h = create_(device);
    std::lock_guard<std::mutex> g(mu_);
    ++created_;
    return h;
  }
  // Back to the pool; destroyed at once after shutdown().
  void give(int device, Handle h) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!shut_) {
        free_[device].push_back(h);
        return;
      }
    }
    destroy_one(device, h);
  }
  // Destroys every free handle (device by device, outside the lock); later gives destroy theirs.
  void shutdown() {
    std::map<int, std::vector<Handle>> mine;
    {
      std::lock_guard<std::mutex> g(mu_);
      shut_ = true;
      mine.swap(free_);
    }
    for (auto& [device, hs] : mine)
      for (Handle h : hs) destroy_one(device, h);
  }
  // Destroys the free handles but keeps the pool open (a test, or a program releasing GPU memory).
  void destroy_free() {
    std::map<int, std::vector<Handle>> mine;
    {
      std::lock_guard<std::mutex> g(mu_);
      mine.swap(free_);
    }
    for (auto& [device, hs] : mine)
      for (Handle h : hs) destroy_one(device, h);
  }

  size_t created() const {
    std::lock_guard<std::mutex> g(mu_);
    return created_;
  }
  size_t destroyed() const {
    std::lock_guard<std::mutex> g(mu_);
    return destroyed_;
  }
  size_t free_handles() const {
    std::lock_guard<std::mutex> g(mu_);
    size_t n = 0;
    for (const auto& [d, hs] : free_) n += hs.size();
    return n;
  }

 private:
  void destroy_one(int device, Handle h) {
    destroy_(device, h);
    std::lock_guard<std::mutex> g(mu_);
    ++destroyed_;
  }
  Create create_;
  Destroy destroy_;
  mutable std::mutex mu_;
  std::map<int, std::vector<Handle>> free_;
  size_t created_ = 0, destroyed_ = 0;
  bool shut_ = false;
};

// One thread's handles, one per device, taken from the pool on first use and given back on destruction
// (a thread_local: the thread's exit). Holds the pool alive until then.
template <class Handle>
class ThreadHandles {
 public:
  explicit ThreadHandles(std::shared_ptr<HandlePool<Handle>> pool) : pool_(std::move(pool)) {}
  ~ThreadHandles() {
    for (auto& [device, h] : mine_) pool_->give(device, h);
  }
  ThreadHandles(const ThreadHandles&) = delete;
  ThreadHandles& operator=(const ThreadHandles&) = delete;

  Handle get(int device) {
    auto it = mine_.find(device);
    if (it == mine_.end()) it = mine_.emplace(device, pool_->take(device)).first;
    return it->second;
  }

 private:
  std::shared_ptr<HandlePool<Handle>> pool_;
  std::map<int, Handle> mine_;
};

}  // namespace ddp
