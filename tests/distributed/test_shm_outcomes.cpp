// test_shm_outcomes.cpp - every rank of an shm group reports the same outcome for each collective: a rank that
// arrives after its peer gave up on the collective (timeout) fails it too instead of completing it with the
// peer's stale part; a broadcast root whose peer calls something else fails with the peer's mismatch instead
// of reporting success; the mismatch error says what usually causes it (uneven inputs: Join).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/distributed/local_world.h"
#include "runtime/distributed/shm/shm_segment.h"
#include "tests/support/collective_checks.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;
using ddp::testing::error_of;

namespace {

ProcessGroupOptions quick(std::chrono::milliseconds timeout) {
  ProcessGroupOptions o;
  o.timeout = timeout;
  o.debug_collectives = false;
  return o;
}

// Keeps every rank's group alive (not Closed) until all ranks have their outcome, so a late rank meets a peer
// that failed, not one that left.
class Latch {
 public:
  explicit Latch(int n) : left_(n) {}
  void arrive_and_wait() {
    left_.fetch_sub(1);
    while (left_.load() > 0) std::this_thread::sleep_for(1ms);
  }

 private:
  std::atomic<int> left_;
};

// One collective on `pg` over a buffer of n doubles; its error text ("" on success).
using Collective = std::function<std::string(ProcessGroup& pg, std::vector<double>& buf)>;

struct Case {
  const char* name;
  int64_t n;
  Collective run;
};

std::vector<Case> cases(int world) {
  return {
      {"small all-reduce", 16,
       [](ProcessGroup& pg, std::vector<double>& b) { return error_of(pg.allreduce(comm_buffer(b.data(), 16))); }},
      {"large all-reduce", 20000,
       [](ProcessGroup& pg, std::vector<double>& b) {
         return error_of(pg.allreduce(comm_buffer(b.data(), 20000)));
       }},
      {"broadcast from the late rank", 16,
       [world](ProcessGroup& pg, std::vector<double>& b) {
         return error_of(pg.broadcast(comm_buffer(b.data(), 16), world - 1));
       }},
      {"broadcast to the late rank", 16,
       [](ProcessGroup& pg, std::vector<double>& b) { return error_of(pg.broadcast(comm_buffer(b.data(), 16), 0)); }},
      {"all-gather", 16 * world,
       [world](ProcessGroup& pg, std::vector<double>& b) {
         std::vector<double> in(16, 1.0);
         return error_of(pg.allgather(comm_buffer(in.data(), 16), comm_buffer(b.data(), 16 * world)));
       }},
      {"reduce-scatter", 16 * world,
       [world](ProcessGroup& pg, std::vector<double>& b) {
         std::vector<double> out(16);
         return error_of(pg.reduce_scatter(comm_buffer(b.data(), 16 * world), comm_buffer(out.data(), 16)));
       }},
      {"barrier", 0, [](ProcessGroup& pg, std::vector<double>&) { return error_of(pg.barrier()); }},
  };
}

}  // namespace

// The last rank issues the collective only after the others' timeout has passed: every rank must fail it.
// (Before the vote, the late rank found every mark it needed and completed what its peers had given up on.)
TEST(ShmOutcomes, ALateRankFailsWhatItsPeersGaveUpOn) {
  for (int world : {2, 3}) {
    for (const Case& c : cases(world)) {
      std::vector<std::string> errors(world);
      Latch latch(world);
      run_threads(
          world,
          [&](int rank, ProcessGroup& pg) {
            std::vector<double> buf(c.n, 1.0);
            if (rank == world - 1) std::this_thread::sleep_for(700ms);
            errors[rank] = c.run(pg, buf);
            latch.arrive_and_wait();
          },
          quick(250ms), "shm");
      for (int r = 0; r < world; ++r)
        EXPECT_NE(errors[r], "") << c.name << ", world " << world << ": rank " << r
                                 << " completed a collective its peers failed";
      EXPECT_NE(errors[world - 1].find("failed"), std::string::npos) << errors[world - 1];
    }
  }
}

// The root of a broadcast does not read its peers' data, but it learns of their mismatch: every rank fails.
TEST(ShmOutcomes, ABroadcastRootFailsWhenAPeerCallsSomethingElse) {
  for (int world : {2, 3}) {
    for (int root : {0, world - 1}) {
      std::vector<std::string> errors(world);
      Latch latch(world);
      run_threads(
          world,
          [&](int rank, ProcessGroup& pg) {
            std::vector<double> buf(32, 1.0);
            const int64_t n = rank == (root + 1) % world ? 24 : 16;  // one peer passes another count
            errors[rank] = error_of(pg.broadcast(comm_buffer(buf.data(), n), root));
            latch.arrive_and_wait();
          },
          quick(5s), "shm");
      for (int r = 0; r < world; ++r)
        EXPECT_NE(errors[r].find("collective mismatch at sequence number 0"), std::string::npos)
            << "world " << world << " root " << root << ", rank " << r << ": '" << errors[r] << "'";
    }
  }
}

TEST(ShmOutcomes, TheMismatchErrorPointsAtJoinForUnevenInputs) {
  std::vector<std::string> errors(2);
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg) {
        std::vector<float> buf(64, 1.0f);
        errors[rank] = error_of(pg.allreduce(comm_buffer(buf.data(), rank == 0 ? 64 : 32)));
      },
      quick(5s), "shm");
  for (const auto& e : errors) EXPECT_NE(e.find("uneven inputs: use ddp::Join"), std::string::npos) << e;
}

// Many collectives complete on every rank with the vote in place: the word of each parity is reused.
TEST(ShmOutcomes, ThousandsOfCollectivesCompleteOnEveryRank) {
  run_threads(
      3,
      [&](int rank, ProcessGroup& pg) {
        std::vector<std::shared_ptr<Work>> works;
        std::vector<int64_t> v(3000);
        for (int k = 0; k < 3000; ++k) {
          v[k] = k * (rank + 1);
          works.push_back(pg.allreduce(comm_buffer(&v[k], 1)));
        }
        for (auto& w : works) w->wait();
        for (int k = 0; k < 3000; ++k) ASSERT_EQ(v[k], 6 * k);
      },
      quick(30s), "shm");
}
