// test_failures.cpp - what a user sees when ranks disagree: a rank that skips a collective makes the others
// fail within the timeout with an error naming the collective, its sequence number and the missing rank; the
// debug mode reports a mismatched call with both ranks' descriptions; the factory refuses unknown backends.
#include <gtest/gtest.h>

#include <chrono>

#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/distributed/store_server.h"
#include "tests/support/collective_checks.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;

using ddp::testing::error_of;

TEST(CollectiveFailures, SkippedCollectiveTimesOutNamingTheMissingRank) {
  ddp::testing::expect_skipped_collective_names_the_missing_rank("gloo", 2s);
}

TEST(CollectiveFailures, DebugModeReportsMismatchedCallsOfBothRanks) {
  ProcessGroupOptions options;
  options.timeout = 10s;
  options.debug_collectives = true;
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg) {
        std::vector<float> buf(16, 1.0f);
        pg.allreduce(comm_buffer(buf.data(), 16))->wait();  // matching calls pass the check
        pg.barrier()->wait();
        EXPECT_EQ(buf[0], 2.0f);
        const int64_t n = rank == 0 ? 16 : 8;
        std::string err = error_of(pg.allreduce(comm_buffer(buf.data(), n)));
        const std::string mine = "allreduce (" + std::to_string(n) + " x float32 on cpu, sum)";
        const std::string theirs =
            "allreduce (" + std::to_string(rank == 0 ? 8 : 16) + " x float32 on cpu, sum)";
        EXPECT_NE(err.find("collective mismatch at sequence number 2"), std::string::npos) << err;
        EXPECT_NE(err.find("rank " + std::to_string(rank) + " calls " + mine), std::string::npos) << err;
        EXPECT_NE(err.find("rank " + std::to_string(1 - rank) + " calls " + theirs), std::string::npos)
            << err;
      },
      options);
}

TEST(CollectiveFailures, DebugModeReportsDifferentOps) {
  ProcessGroupOptions options;
  options.timeout = 10s;
  options.debug_collectives = true;
  run_threads(
      3,
      [&](int rank, ProcessGroup& pg) {
        std::vector<int32_t> buf(4, rank);
        auto w = rank == 2 ? pg.broadcast(comm_buffer(buf.data(), 4), 0)
                           : pg.allreduce(comm_buffer(buf.data(), 4));
        std::string err = error_of(w);
        EXPECT_NE(err.find("collective mismatch at sequence number 0"), std::string::npos) << err;
        if (rank == 2) {
          EXPECT_NE(err.find("broadcast (4 x int32 on cpu, root 0)"), std::string::npos) << err;
        }
        EXPECT_NE(err.find("allreduce (4 x int32 on cpu, sum)"), std::string::npos) << err;
      },
      options);
}

TEST(ProcessGroupFactory, BuildsGlooGroupsFromEnvAndStore) {
  StoreServer server("127.0.0.1", 0, "tok");
  std::vector<std::thread> threads;
  std::vector<int64_t> results(2, 0);
  std::vector<std::string> errors(2);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        DistEnv env;
        env.rank = r;
        env.world_size = 2;
        env.master_port = server.port();
        env.token = "tok";
        auto store = std::make_shared<Store>(env.master_addr, env.master_port, env.token, 10s);
        ProcessGroupOptions options;
        options.timeout = 10s;
        auto pg = new_process_group(env, store, "gloo");
        auto pg2 = new_process_group(env, *store, "gloo", options);  // a second group on the same store
        EXPECT_EQ(pg->backend_name(), "gloo");
        int64_t v = r + 1;
        pg->allreduce(comm_buffer(&v, 1))->wait();
        pg2->allreduce(comm_buffer(&v, 1))->wait();
        results[r] = v;
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(results[0], 6);
  EXPECT_EQ(results[1], 6);
}

TEST(ProcessGroupFactory, UnknownBackendsAreRefused) {
  try {
    resolve_backend("mpi");
    ADD_FAILURE() << "backend mpi accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected gloo, nccl, shm, hier, cpu or auto"), std::string::npos)
        << e.what();
  }
  if (!cuda_compiled()) {
    EXPECT_THROW(resolve_backend("nccl"), Error);
  }
}

TEST(ProcessGroupOptions, TimeoutFromEnvironment) {
  setenv("DDP_COLLECTIVE_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(ProcessGroupOptions{}.timeout, 2500ms);
  setenv("DDP_COLLECTIVE_TIMEOUT_S", "soon", 1);
  EXPECT_THROW(ProcessGroupOptions{}, Error);
  unsetenv("DDP_COLLECTIVE_TIMEOUT_S");
  EXPECT_EQ(ProcessGroupOptions{}.timeout, std::chrono::minutes(10));
  setenv("DDP_DEBUG_COLLECTIVES", "1", 1);
  EXPECT_TRUE(ProcessGroupOptions{}.debug_collectives);
  unsetenv("DDP_DEBUG_COLLECTIVES");
  EXPECT_FALSE(ProcessGroupOptions{}.debug_collectives);
}
