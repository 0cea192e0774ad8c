// deferred_release.h - keeps things alive until the asynchronous work that uses them has finished, without
// blocking anyone: an entry is a "finished?" query (a CUDA event query) and what to release; drain() releases
// the entries whose work finished. The Gloo CUDA staging path parks a collective's buffers (the caller's
// tensors and the pinned blocks) here while its host-to-device copy may still be running on the side stream,
// so the stream-ordered allocator cannot hand that memory out while the copy still writes into it. Plain C++
// so the lifetime logic is tested without a GPU (tests/distributed/test_deferred_release.cpp).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace ddp::dist {

class DeferredRelease {
 public:
  // Keeps `hold` alive until finished() returns true in a later drain(). finished() must be cheap and
  // non-blocking; it is called with no lock of this class held.
  void add(std::function<bool()> finished, std::shared_ptr<void> hold) {
    std::lock_guard<std::mutex> g(mu_);
    entries_.push_back({std::move(finished), std::move(hold)});
  }

  // Releases every entry whose work finished (the holds are destroyed outside the lock, so a destructor may
  // call back into this class); returns how many entries are still held.
  size_t drain() {
    std::vector<Entry> mine;
    {
      std::lock_guard<std::mutex> g(mu_);
      mine.swap(entries_);
    }
    std::vector<Entry> keep, release;
    for (auto& e : mine) (e.finished() ? release : keep).push_back(std::move(e));
    release.clear();  // the holds die here, outside the lock
    std::lock_guard<std::mutex> g(mu_);
    for (auto& e : keep) entries_.push_back(std::move(e));
    return entries_.size();
  }

  size_t pending() const {
    std::lock_guard<std::mutex> g(mu_);
    return entries_.size();
  }

 private:
  struct Entry {
    std::function<bool()> finished;
    std::shared_ptr<void> hold;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace ddp::dist
