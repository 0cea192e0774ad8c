// test_deferred_release.cpp - the lifetime rule of the Gloo CUDA staging path
// (runtime/distributed/deferred_release.h): a buffer handed over while its asynchronous copy may still run
// stays alive until the copy is reported finished, entries finishing out of order are released
// independently, and nothing blocks.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "runtime/distributed/deferred_release.h"

using ddp::dist::DeferredRelease;

namespace {
// Counts its live instances: stands for a tensor's storage (or a pinned block) that must outlive the copy.
struct Buffer {
  static inline int alive = 0;
  Buffer() { ++alive; }
  ~Buffer() { --alive; }
};
}  // namespace

TEST(DeferredRelease, KeepsTheBufferUntilTheCopyFinished) {
  DeferredRelease dr;
  bool copy_done = false;
  {
    auto buf = std::make_shared<Buffer>();
    dr.add([&] { return copy_done; }, buf);
  }  // the caller dropped its tensor right after issuing the collective
  EXPECT_EQ(Buffer::alive, 1);
  EXPECT_EQ(dr.drain(), 1u);
  EXPECT_EQ(Buffer::alive, 1) << "released while the host-to-device copy may still write into it";
  copy_done = true;
  EXPECT_EQ(dr.drain(), 0u);
  EXPECT_EQ(Buffer::alive, 0);
}

TEST(DeferredRelease, EntriesFinishingOutOfOrderAreReleasedIndependently) {
  DeferredRelease dr;
  bool done[3] = {false, false, false};
  for (int i = 0; i < 3; ++i) dr.add([&done, i] { return done[i]; }, std::make_shared<Buffer>());
  done[2] = true;
  EXPECT_EQ(dr.drain(), 2u);
  EXPECT_EQ(Buffer::alive, 2);
  done[0] = true;
  EXPECT_EQ(dr.drain(), 1u);
  done[1] = true;
  EXPECT_EQ(dr.drain(), 0u);
  EXPECT_EQ(Buffer::alive, 0);
  EXPECT_EQ(dr.pending(), 0u);
}

// A hold whose destructor adds a new entry (a staging object releasing into the same list) must not deadlock.
TEST(DeferredRelease, AReleasedHoldMayAddAnEntry) {
  DeferredRelease dr;
  struct Readder {
    explicit Readder(DeferredRelease* d) : dr(d) {}
    DeferredRelease* dr;
    ~Readder() {
      dr->add([] { return true; }, nullptr);
    }
  };
  dr.add([] { return true; }, std::make_shared<Readder>(&dr));
  dr.drain();
  EXPECT_EQ(dr.pending(), 1u);
  EXPECT_EQ(dr.drain(), 0u);
}
