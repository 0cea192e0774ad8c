// test_abort.cpp - ProcessGroup::abort() on every CPU backend (shm, gloo, hier) at worlds 2-4, ranks as
// threads over one loopback store: a collective blocked on a peer that never calls it ends within 1 s with
// the abort's reason, queued and later collectives fail at once with it, the group is destroyed within 1 s;
// the peers blocked on the aborting rank fail within seconds, not at their timeout; abort is idempotent,
// works before any collective and from another thread while the owner waits; and a new group of the same
// ranks under another name over the same store works afterwards (how fault-tolerant training rebuilds).
// RunOnCaller: the same backends with ProcessGroupOptions::run_on_caller (no worker thread): complete Works,
// abort from another thread, a peer that never comes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <latch>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/distributed/gloo_group.h"
#include "runtime/distributed/shm/hier_group.h"
#include "runtime/distributed/shm/shm_group.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_server.h"
#include "tests/support/collective_checks.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ddp::testing::error_of;

namespace {

// A bug shows as a failed bound, never as a 10-minute hang: collectives time out after this.
constexpr auto kTimeout = 5s;
// What "at once" means for abort (the contract says ~100 ms; slack for a loaded 2-core machine).
constexpr auto kPrompt = 1s;

struct Case {
  const char* backend;
  int world;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.backend << " at world " << c.world; }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.backend) + "_world" + std::to_string(info.param.world);
}

// Every CPU backend at worlds 2-4 (hier: even and odd ranks on two pretend hosts, as run_threads splits
// them).
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* backend : {"shm", "gloo", "hier"})
    for (int world = 2; world <= 4; ++world) cases.push_back({backend, world});
  return cases;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::unique_ptr<ProcessGroup> make_group(const std::string& backend, Store& store, int rank, int world,
                                         const std::string& name,
                                         std::chrono::milliseconds timeout = kTimeout, bool on_caller = false) {
  ProcessGroupOptions opts;
  opts.timeout = timeout;
  opts.name = name;
  opts.debug_collectives = false;
  opts.run_on_caller = on_caller;
  if (backend == "shm") return std::make_unique<ShmProcessGroup>(store.clone(), rank, world, opts);
  if (backend == "gloo")
    return std::make_unique<GlooProcessGroup>(store.clone(), rank, world, opts, "127.0.0.1");
  std::vector<int> hosts(world);
  for (int q = 0; q < world; ++q) hosts[q] = q % 2;
  return std::make_unique<HierProcessGroup>(store.clone(), rank, world, opts, "127.0.0.1", hosts);
}

// One thread per rank, each with its own store client; the first failure (by rank) is rethrown. A failed
// EXPECT inside is reported by GoogleTest as usual.
void run_ranks(int world, const std::function<void(int rank, Store& store)>& fn) {
  StoreServer server("127.0.0.1", 0, "abort-test");
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        Store store("127.0.0.1", server.port(), "abort-test", 30s);
        fn(r, store);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Destroys the group and checks that it took less than kPrompt.
void destroy_promptly(std::unique_ptr<ProcessGroup>& pg, const char* who) {
  const auto t0 = Clock::now();
  pg.reset();
  EXPECT_LT(seconds_since(t0), std::chrono::duration<double>(kPrompt).count())
      << who << ": destroying took long";
}

// The error of a Work that must already have failed (or fail within kPrompt).
std::string prompt_error(const std::shared_ptr<Work>& w) {
  const auto t0 = Clock::now();
  std::string err = error_of(w);
  EXPECT_LT(seconds_since(t0), std::chrono::duration<double>(kPrompt).count()) << w->description();
  return err;
}

#define EXPECT_HAS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "expected '" << (part) << "' in: " << (text)

class Abort : public ::testing::TestWithParam<Case> {};

// (a) Rank 0's all-reduce waits for peers that never call it; rank 0 aborts: the Work fails within 1 s with
// the reason, the next collective fails at once with it, and the group is destroyed within 1 s.
TEST_P(Abort, BlockedCollectiveEndsWithTheReason) {
  const Case c = GetParam();
  std::latch rank0_done(1);
  run_ranks(c.world, [&](int rank, Store& store) {
    auto pg = make_group(c.backend, store, rank, c.world, "a");
    if (rank != 0) {
      rank0_done.wait();  // idle until rank 0 is through: it must not fail because a peer left
      pg.reset();
      return;
    }
    std::vector<float> buf(64, 1.0f);
    auto w = pg->allreduce(comm_buffer(buf.data(), 64));
    std::this_thread::sleep_for(150ms);  // blocked on the peers by now
    EXPECT_FALSE(w->is_completed());
    const auto t0 = Clock::now();
    pg->abort("rank 3 died (test a)");
    EXPECT_TRUE(pg->aborted());
    const std::string err = error_of(w);
    EXPECT_LT(seconds_since(t0), 1.0) << err;
    EXPECT_HAS(err, "rank 3 died (test a)");
    EXPECT_HAS(err, "allreduce #0");
    const std::string later = prompt_error(pg->barrier());
    EXPECT_HAS(later, "rank 3 died (test a)");
    destroy_promptly(pg, "rank 0");
    rank0_done.count_down();
  });
}

// (b) The peers wait in an all-reduce rank 0 never issues; rank 0 aborts: every peer's collective fails
// within a few seconds (the timeout is 20 s).
TEST_P(Abort, PeersBlockedOnTheAbortingRankFail) {
  const Case c = GetParam();
  std::latch peers_done(c.world - 1);
  run_ranks(c.world, [&](int rank, Store& store) {
    auto pg = make_group(c.backend, store, rank, c.world, "b", 20s);
    if (rank == 0) {
      std::this_thread::sleep_for(200ms);  // the peers are blocked in their all-reduce
      pg->abort("stopping: a rank died (test b)");
      peers_done.wait();
      destroy_promptly(pg, "rank 0");
      return;
    }
    std::vector<float> buf(64, 1.0f);
    const auto t0 = Clock::now();
    const std::string err = error_of(pg->allreduce(comm_buffer(buf.data(), 64)));
    EXPECT_FALSE(err.empty()) << "rank " << rank;
    EXPECT_LT(seconds_since(t0), 5.0) << "rank " << rank << ": " << err;
    peers_done.count_down();
    destroy_promptly(pg, "a peer");
  });
}

// (c) Rank 0 aborts with collectives queued (all fail with the reason), twice (the first reason stays); the
// other ranks abort before any collective, and theirs then fail at once with their own reason.
TEST_P(Abort, QueuedTwiceAndBeforeAnyCollective) {
  const Case c = GetParam();
  std::latch rank0_done(1);
  run_ranks(c.world, [&](int rank, Store& store) {
    auto pg = make_group(c.backend, store, rank, c.world, "c");
    std::vector<float> buf(64, 1.0f);
    if (rank == 0) {
      std::vector<std::shared_ptr<Work>> works;
      works.push_back(pg->allreduce(comm_buffer(buf.data(), 64)));  // runs, blocked on the peers
      works.push_back(pg->allreduce(comm_buffer(buf.data(), 32)));  // queued behind it
      works.push_back(pg->broadcast(comm_buffer(buf.data(), 16), 0));
      works.push_back(pg->barrier());
      std::this_thread::sleep_for(100ms);
      pg->abort("first reason (test c)");
      pg->abort("second reason");
      for (auto& w : works) {
        const std::string err = prompt_error(w);
        EXPECT_HAS(err, "first reason (test c)");
        EXPECT_EQ(err.find("second reason"), std::string::npos) << err;
      }
      EXPECT_HAS(prompt_error(pg->allreduce(comm_buffer(buf.data(), 8))), "first reason (test c)");
      destroy_promptly(pg, "rank 0");
      rank0_done.count_down();
      return;
    }
    rank0_done.wait();
    EXPECT_FALSE(pg->aborted());
    pg->abort("never ran one (test c)");
    pg->abort("again");
    EXPECT_TRUE(pg->aborted());
    const std::string err = prompt_error(pg->allreduce(comm_buffer(buf.data(), 64)));
    EXPECT_HAS(err, "never ran one (test c)");
    EXPECT_HAS(err, "rank " + std::to_string(rank));
    destroy_promptly(pg, "a peer");
  });
}

// (d) The owner thread blocks in wait(); another thread aborts: wait() throws within 1 s with the reason.
TEST_P(Abort, FromAnotherThreadWhileTheOwnerWaits) {
  const Case c = GetParam();
  std::latch rank0_done(1);
  run_ranks(c.world, [&](int rank, Store& store) {
    auto pg = make_group(c.backend, store, rank, c.world, "d");
    if (rank != 0) {
      rank0_done.wait();
      pg.reset();
      return;
    }
    std::vector<float> buf(64, 1.0f);
    auto w = pg->allreduce(comm_buffer(buf.data(), 64));
    std::atomic<int64_t> aborted_at_ns{0};
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      aborted_at_ns = Clock::now().time_since_epoch().count();
      pg->abort("watchdog saw a dead rank (test d)");
    });
    std::string err;
    try {
      w->wait();
    } catch (const std::exception& e) {
      err = e.what();
    }
    const auto ended = Clock::now().time_since_epoch().count();
    aborter.join();
    ASSERT_NE(aborted_at_ns.load(), 0) << "wait() returned before the abort: " << err;
    EXPECT_LT((ended - aborted_at_ns.load()) / 1e9, 1.0) << err;
    EXPECT_HAS(err, "watchdog saw a dead rank (test d)");
    destroy_promptly(pg, "rank 0");
    rank0_done.count_down();
  });
}

// (e) Rank 0 aborts while the others wait on it (and keeps its group until they failed); they fail and abort
// too; every rank destroys the group and builds a new one of the same ranks under another name over the same
// store: its all-reduce is right.
TEST_P(Abort, NewGroupUnderAnotherNameWorksAfterwards) {
  const Case c = GetParam();
  std::latch peers_failed(c.world - 1);
  run_ranks(c.world, [&](int rank, Store& store) {
    {
      auto pg = make_group(c.backend, store, rank, c.world, "e-step1");
      std::vector<float> buf(1000, 1.0f);
      pg->allreduce(comm_buffer(buf.data(), 1000))->wait();
      EXPECT_EQ(buf[999], static_cast<float>(c.world));
      if (rank == 0) {
        std::this_thread::sleep_for(100ms);
        pg->abort("rank 0 gives up on step 1 (test e)");
        peers_failed.wait();
      } else {
        const auto t0 = Clock::now();
        EXPECT_FALSE(error_of(pg->allreduce(comm_buffer(buf.data(), 1000))).empty());
        EXPECT_LT(seconds_since(t0), 3.0) << "rank " << rank;
        peers_failed.count_down();
        pg->abort("a peer failed (test e)");
      }
      destroy_promptly(pg, "step 1");
    }
    auto pg = make_group(c.backend, store, rank, c.world, "e-step1-rebuilt");
    std::vector<float> buf(100000);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 7);
    pg->allreduce(comm_buffer(buf.data(), static_cast<int64_t>(buf.size())))->wait();
    const float ranks_sum = static_cast<float>(c.world * (c.world + 1) / 2);
    for (size_t i : {size_t{0}, size_t{6}, buf.size() - 1})
      EXPECT_EQ(buf[i], ranks_sum + static_cast<float>(c.world) * static_cast<float>(i % 7))
          << "element " << i;
    EXPECT_FALSE(pg->aborted());
  });
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, Abort, ::testing::ValuesIn(all_cases()), case_name);

// ---------------------------------------------------------------- collectives run on the caller's thread

// ProcessGroupOptions::run_on_caller: each collective runs before its entry point returns (the Work is
// complete, with the right result); a caller blocked in one (its peers never come) is ended by abort() from
// another thread within 1 s, with the reason, and later collectives fail at once; a peer that never comes
// ends the call at the timeout, naming it.
class RunOnCaller : public ::testing::TestWithParam<Case> {};

TEST_P(RunOnCaller, WorkIsCompleteWhenTheCallReturns) {
  const Case c = GetParam();
  run_ranks(c.world, [&](int rank, Store& store) {
    auto pg = make_group(c.backend, store, rank, c.world, "oc", kTimeout, /*on_caller=*/true);
    for (int round = 0; round < 3; ++round) {
      std::vector<float> buf(1000 + round, static_cast<float>(rank + 1));
      auto w = pg->allreduce(comm_buffer(buf.data(), static_cast<int64_t>(buf.size())));
      EXPECT_TRUE(w->is_completed()) << "round " << round;
      w->wait();
      const float sum = static_cast<float>(c.world * (c.world + 1) / 2);
      for (float v : buf) ASSERT_EQ(v, sum) << "round " << round << " rank " << rank;
      std::vector<float> b(7, static_cast<float>(rank));
      auto wb = pg->broadcast(comm_buffer(b.data(), 7), round % c.world);
      EXPECT_TRUE(wb->is_completed());
      for (float v : b) ASSERT_EQ(v, static_cast<float>(round % c.world));
      auto wbar = pg->barrier();
      EXPECT_TRUE(wbar->is_completed());
    }
    EXPECT_EQ(pg->next_sequence_number(), 9u);
  });
}

TEST_P(RunOnCaller, AbortFromAnotherThreadEndsTheBlockedCall) {
  const Case c = GetParam();
  std::latch rank0_done(1);
  run_ranks(c.world, [&](int rank, Store& store) {
    auto pg = make_group(c.backend, store, rank, c.world, "oa", kTimeout, /*on_caller=*/true);
    if (rank != 0) {
      rank0_done.wait();
      pg.reset();
      return;
    }
    std::atomic<int64_t> aborted_at{0};
    std::thread aborter([&] {
      std::this_thread::sleep_for(150ms);  // rank 0 is blocked inside allreduce() by now
      aborted_at = Clock::now().time_since_epoch().count();
      pg->abort("stopped from another thread (run on caller)");
    });
    std::vector<float> buf(64, 1.0f);
    auto w = pg->allreduce(comm_buffer(buf.data(), 64));  // returns once aborted
    const auto returned = Clock::now();
    aborter.join();
    EXPECT_TRUE(w->is_completed());
    const double after_abort = std::chrono::duration<double>(
        returned - Clock::time_point(Clock::duration(aborted_at.load()))).count();
    EXPECT_LT(after_abort, 1.0);
    const std::string err = error_of(w);
    EXPECT_HAS(err, "stopped from another thread (run on caller)");
    EXPECT_HAS(prompt_error(pg->barrier()), "stopped from another thread (run on caller)");
    destroy_promptly(pg, "rank 0");
    rank0_done.count_down();
  });
}

TEST_P(RunOnCaller, PeerThatNeverComesEndsTheCallAtTheTimeout) {
  const Case c = GetParam();
  std::latch rank0_done(1);
  run_ranks(c.world, [&](int rank, Store& store) {
    auto pg = make_group(c.backend, store, rank, c.world, "ot", 1s, /*on_caller=*/true);
    if (rank != 0) {
      rank0_done.wait();
      return;
    }
    std::vector<float> buf(64, 1.0f);
    const auto t0 = Clock::now();
    auto w = pg->allreduce(comm_buffer(buf.data(), 64));
    const double took = seconds_since(t0);
    EXPECT_TRUE(w->is_completed());
    EXPECT_GE(took, 0.9);
    EXPECT_LT(took, 5.0);
    const std::string err = error_of(w);
    EXPECT_HAS(err, "allreduce #0");
    EXPECT_HAS(err, "rank");
    rank0_done.count_down();
  });
}

// A collective issued under ScopedCollectiveTimeout ends at its own timeout (0.5 s), not the group's (5 s),
// naming it - on the worker thread and on the caller's; the guard is per thread and ends with its scope.
TEST_P(RunOnCaller, CollectiveOwnTimeoutEndsIt) {
  const Case c = GetParam();
  for (bool on_caller : {false, true}) {
    std::latch rank0_done(1);
    run_ranks(c.world, [&](int rank, Store& store) {
      auto pg = make_group(c.backend, store, rank, c.world, on_caller ? "tc" : "tw", kTimeout, on_caller);
      if (rank != 0) {
        rank0_done.wait();
        return;
      }
      std::vector<float> buf(64, 1.0f);
      std::shared_ptr<Work> w;
      const auto t0 = Clock::now();
      {
        ScopedCollectiveTimeout own(500ms);
        EXPECT_EQ(ScopedCollectiveTimeout::current(), 500ms);
        w = pg->allreduce(comm_buffer(buf.data(), 64));
      }
      EXPECT_EQ(ScopedCollectiveTimeout::current(), 0ms);
      const std::string err = error_of(w);
      const double took = seconds_since(t0);
      EXPECT_GE(took, 0.45) << err;
      EXPECT_LT(took, 3.0) << (on_caller ? "on the caller: " : "on the worker: ") << err;
      EXPECT_HAS(err, "allreduce #0");
      rank0_done.count_down();
    });
  }
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, RunOnCaller, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
