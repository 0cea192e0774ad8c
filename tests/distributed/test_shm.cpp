// test_shm.cpp - what is particular to the shared-memory group: a rank that skips a collective, leaves, calls
// something else, or is killed in the middle of a collective makes the others fail with a clear error (within
// the timeout, or at once), never hang; /dev/shm holds nothing of ours afterwards, and segments left by a
// killed process are removed by the next group; the factory picks shm on one host and gloo when told.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/distributed/shm/host_identity.h"
#include "runtime/distributed/shm/shm_segment.h"
#include "runtime/distributed/shm/shm_sync.h"
#include "runtime/distributed/store_server.h"
#include "tests/support/collective_checks.h"
#include "tests/support/run_process.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;
using ddp::testing::error_of;

namespace {

// Our segments (of any pid in `pids`) still in /dev/shm.
std::vector<std::string> segments_of(const std::vector<pid_t>& pids) { return shm::list_segments_of(pids); }

class Shm : public ::testing::Test {
 protected:
  // Whatever the test did, this process leaves nothing in /dev/shm.
  void TearDown() override { EXPECT_EQ(segments_of({::getpid()}), std::vector<std::string>{}); }
};

ProcessGroupOptions quick(std::chrono::milliseconds timeout) {
  ProcessGroupOptions o;
  o.timeout = timeout;
  o.debug_collectives = false;
  return o;
}

}  // namespace

TEST_F(Shm, SkippedCollectiveTimesOutNamingTheMissingRank) {
  ddp::testing::expect_skipped_collective_names_the_missing_rank("shm", 5s);
}

// Without any debug mode: the ranks compare their calls through the segment on every collective.
TEST_F(Shm, MismatchedCallsAreReportedNotMixed) {
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg, Store& store) {
        std::vector<float> buf(64, 1.0f);
        pg.allreduce(comm_buffer(buf.data(), 64))->wait();
        const int64_t n = rank == 0 ? 64 : 32;
        std::string err = error_of(pg.allreduce(comm_buffer(buf.data(), n)));
        store.set("seen/" + std::to_string(rank), "1");
        store.wait({"seen/0", "seen/1"}, 30s);
        EXPECT_NE(err.find("collective mismatch at sequence number 1"), std::string::npos) << err;
        EXPECT_NE(err.find(std::to_string(n) + " x float32"), std::string::npos) << err;
      },
      quick(30s), "shm");
}

TEST_F(Shm, DifferentKindsOfCollectiveAreReported) {
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg) {
        std::vector<double> buf(8, 1.0);
        std::string err = rank == 0 ? error_of(pg.allreduce(comm_buffer(buf.data(), 8)))
                                    : error_of(pg.broadcast(comm_buffer(buf.data(), 8), 0));
        EXPECT_NE(err.find("collective mismatch at sequence number 0"), std::string::npos) << err;
      },
      quick(30s), "shm");
}

// A rank whose group is destroyed while the others wait for it: they fail at once, not after the timeout.
TEST_F(Shm, RankThatLeavesFailsThePeersAtOnce) {
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg, Store& store) {
        if (rank == 1) return;  // destroys its group without taking part in #0
        (void)store;
        std::vector<float> buf(16, 1.0f);
        auto start = std::chrono::steady_clock::now();
        std::string err = error_of(pg.allreduce(comm_buffer(buf.data(), 16)));
        EXPECT_NE(err.find("rank 1 destroyed its process group"), std::string::npos) << err;
        EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);  // not the 60 s timeout
      },
      quick(60s), "shm");
}

// Processes: rank 1 is SIGKILLed in the middle of a 16 MiB all-reduce; ranks 0 and 2 notice its death from
// its pid and fail with an error naming it long before the 60 s timeout. Nothing stays in /dev/shm.
TEST_F(Shm, RankKilledMidCollectiveFailsTheOthersNotHangs) {
  const std::string token = "shm-kill-test";
  StoreServer server("127.0.0.1", 0, token);
  const int world = 3;
  std::vector<std::future<ddp::testing::ProcessResult>> runs;
  std::vector<pid_t> pids(world, 0);
  std::mutex mu;
  const int port = server.port();
  for (int r = 0; r < world; ++r) {
    ddp::testing::ProcessOptions opt;
    opt.timeout_s = 120;
    opt.on_start = [&, r](pid_t p) {
      std::lock_guard<std::mutex> g(mu);
      pids[r] = p;
    };
    runs.push_back(std::async(std::launch::async, [r, port, token, world, opt] {
      return ddp::testing::run_process(
          {std::string(DDP_BIN_DIR) + "/testprog_shm_worker", std::to_string(port), token, std::to_string(r),
           std::to_string(world), "die"},
          opt);
    }));
  }
  std::vector<ddp::testing::ProcessResult> res;
  for (auto& f : runs) res.push_back(f.get());
  auto all = [&] { return ddp::testing::describe_ranks(res); };
  EXPECT_EQ(res[1].exit_code, 128 + SIGKILL) << all();
  for (int r : {0, 2}) {
    EXPECT_FALSE(res[r].timed_out) << all();
    EXPECT_EQ(res[r].exit_code, 3) << all();
    EXPECT_NE(res[r].err.find("shm allreduce #1 (4194304 x float32 on cpu, sum)"), std::string::npos)
        << all();
    // "rank 1 (pid P) died", or the other survivor saw it first, failed, and its failure says so.
    EXPECT_NE(res[r].err.find(" died"), std::string::npos) << all();
  }
  EXPECT_EQ(segments_of(pids), std::vector<std::string>{});
}

// A process that crashed after creating its segment but before the group unlinked it leaves
// /dev/shm/ddpshm.*; the next group on the host removes it (and leaves live processes' segments, and other
// pid namespaces', alone).
TEST_F(Shm, SegmentsOfDeadProcessesAreRemovedByTheNextGroup) {
  // The child's name is looked for while it lives: a group starting in a test running in parallel would
  // sweep it as soon as the child is dead.
  int created[2], go[2];
  ASSERT_EQ(::pipe(created), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(go[1]);  // or the read below never sees the end
    ::close(created[0]);
    auto s = shm::Segment::create(shm::segment_name("deadbeefdeadbeef", "0"), 8192);
    char c = 1;
    if (::write(created[1], &c, 1) != 1) ::_exit(1);
    (void)!::read(go[0], &c, 1);
    ::_exit(0);  // no destructor: the name stays, as after a crash
  }
  ::close(created[1]);
  ::close(go[0]);
  char c = 0;
  EXPECT_EQ(::read(created[0], &c, 1), 1);
  EXPECT_EQ(segments_of({child}).size(), 1u);
  ::close(go[1]);  // the child exits
  ::close(created[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto own = shm::Segment::create(shm::segment_name("feedfeedfeedfeed", "0"), 8192);  // alive: must stay
  // The same dead pid in another pid namespace ("1"): the pid means nothing here, so it must stay too.
  const std::string foreign = std::string(shm::kSegmentPrefix) + "1." + std::to_string(child) + ".cafe.0";
  auto other_ns = shm::Segment::create("/" + foreign, 8192);
  run_threads(
      1, [&](int, ProcessGroup& pg) { pg.barrier()->wait(); }, quick(30s), "shm");
  EXPECT_EQ(segments_of({child}), std::vector<std::string>{});
  EXPECT_EQ(segments_of({::getpid()}).size(), 1u);
  const auto all = shm::list_segments();
  EXPECT_NE(std::find(all.begin(), all.end(), foreign), all.end()) << foreign << " was removed";
  own.unlink();
  other_ns.unlink();
}

// A child that exited but is not reaped yet (a zombie) keeps its segments from other groups' sweeps: they are
// its parent's to remove (ddprun does, before reaping, and reports how many). The sweep used to take them, so
// ddprun's count raced with any shm group starting on the host (Ddprun.RemovesTheSharedMemorySegmentsIts
// WorkersLeft failed once in a parallel run). The parent's remove_segments_of still removes them.
TEST_F(Shm, SegmentsOfAnUnreapedProcessAreLeftToItsParent) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = shm::Segment::create(shm::segment_name("abadcafeabadcafe", "0"), 8192);
    ::_exit(0);  // no destructor: the name stays, as after a crash
  }
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);  // a zombie now
  EXPECT_FALSE(shm::pid_alive(child));
  EXPECT_TRUE(shm::pid_exists(child));
  EXPECT_EQ(segments_of({child}).size(), 1u);
  shm::remove_stale_segments();
  EXPECT_EQ(segments_of({child}).size(), 1u) << "a sweep removed a zombie's segment";
  EXPECT_EQ(shm::remove_segments_of({child}).size(), 1u);
  EXPECT_EQ(segments_of({child}), std::vector<std::string>{});
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(shm::pid_exists(child));
}

TEST_F(Shm, NothingLeftAfterGroupsOfEverySize) {
  for (int world : {1, 2, 4})
    run_threads(
        world,
        [&](int, ProcessGroup& pg) {
          std::vector<int64_t> v(3, 1);
          pg.allreduce(comm_buffer(v.data(), 3))->wait();
          // Every segment was unlinked once all ranks mapped it, while the group still runs.
          EXPECT_EQ(segments_of({::getpid()}), std::vector<std::string>{});
        },
        quick(30s), "shm");
}

TEST_F(Shm, CudaBuffersAreRefusedWithTheAlternative) {
  run_threads(
      1,
      [&](int, ProcessGroup& pg) {
        float x = 0;
        try {
          pg.allreduce(CommBuffer{&x, 1, DType::F32, Device::cuda(0), nullptr});
          ADD_FAILURE() << "a CUDA buffer was accepted";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("use nccl"), std::string::npos) << e.what();
        }
      },
      quick(30s), "shm");
}

TEST(ShmFactory, CpuBackendPicksShmOnOneHostAndGlooWhenForced) {
  StoreServer server("127.0.0.1", 0, "tok");
  std::vector<std::string> names(4);
  std::vector<int64_t> sums(2, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      DistEnv env;
      env.rank = r;
      env.world_size = 2;
      env.master_port = server.port();
      env.token = "tok";
      auto store = std::make_shared<Store>(env.master_addr, env.master_port, env.token, 10s);
      auto cpu = new_process_group(env, store, "cpu", quick(10s));
      auto gloo = new_process_group(env, store, "gloo", quick(10s));
      names[r] = cpu->backend_name();
      names[2 + r] = gloo->backend_name();
      int64_t v = r + 1;
      cpu->allreduce(comm_buffer(&v, 1))->wait();
      gloo->allreduce(comm_buffer(&v, 1))->wait();
      sums[r] = v;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(names, (std::vector<std::string>{"shm", "shm", "gloo", "gloo"}));
  EXPECT_EQ(sums, (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(resolve_backend("auto"), cuda_device_count() > 0 ? "nccl" : "cpu");
  setenv("DDP_SHM", "maybe", 1);
  EXPECT_THROW(shm_allowed_from_env(), Error);
  setenv("DDP_SHM", "0", 1);
  EXPECT_FALSE(shm_allowed_from_env());
  unsetenv("DDP_SHM");
  EXPECT_TRUE(shm_allowed_from_env());
}

TEST(ShmHostIdentity, NamesHostBootAndNamespaces) {
  const std::string id = shm::host_identity();
  EXPECT_NE(id.find("ipc:["), std::string::npos) << id;
  EXPECT_NE(id.find("net:["), std::string::npos) << id;
  EXPECT_NE(id.find("pid:["), std::string::npos) << id;
}

TEST_F(Shm, BadTuningVariablesAreRefusedByName) {
  auto error_with = [](const char* var, const char* value) {
    setenv(var, value, 1);
    std::string err;
    try {
      run_threads(
          1, [](int, ProcessGroup&) {}, quick(10s), "shm");
    } catch (const Error& e) {
      err = e.what();
    }
    unsetenv(var);
    return err;
  };
  std::string e1 = error_with("DDP_SHM_CHUNK_BYTES", "1000");
  EXPECT_NE(e1.find("DDP_SHM_CHUNK_BYTES='1000' is not valid: expected a multiple of 64"), std::string::npos)
      << e1;
  std::string e2 = error_with("DDP_SHM_SPIN_US", "soon");
  EXPECT_NE(e2.find("DDP_SHM_SPIN_US='soon' is not valid"), std::string::npos) << e2;
  std::string e3 = error_with("DDP_SHM_WAITED_SPIN_US", "-5");
  EXPECT_NE(e3.find("DDP_SHM_WAITED_SPIN_US='-5' is not valid"), std::string::npos) << e3;
  // A smaller chunk works (many steps per collective).
  setenv("DDP_SHM_CHUNK_BYTES", "4096", 1);
  run_threads(
      3,
      [](int rank, ProcessGroup& pg) {
        std::vector<double> v(5000, rank + 1.0);
        pg.allreduce(comm_buffer(v.data(), 5000))->wait();
        for (double x : v) ASSERT_EQ(x, 6.0);
      },
      quick(30s), "shm");
  unsetenv("DDP_SHM_CHUNK_BYTES");
}

// Hierarchical group (ranks 0 and 2 on one pretend host, 1 on the other): rank 1 skips #1; the leader of the
// other host fails in the Gloo step at the timeout, and rank 2, waiting on its leader's broadcast, fails as
// soon as the leader's failure is in its shm control block.
TEST_F(Shm, HierSkippedCollectiveFailsEveryWaitingRank) {
  const auto options = quick(1s);
  run_threads(
      3,
      [&](int rank, ProcessGroup& pg, Store& store) {
        std::vector<float> buf(16, 1.0f);
        pg.allreduce(comm_buffer(buf.data(), 16))->wait();
        EXPECT_EQ(buf[0], 3.0f);
        if (rank == 1) {
          store.wait({"done/0", "done/2"}, 30s);
          return;
        }
        auto start = std::chrono::steady_clock::now();
        std::string err = error_of(pg.allreduce(comm_buffer(buf.data(), 16)));
        store.set("done/" + std::to_string(rank), "1");
        EXPECT_NE(
            err.find("hier allreduce #1 (16 x float32 on cpu, sum) failed on rank " + std::to_string(rank)),
            std::string::npos)
            << err;
        EXPECT_LT(std::chrono::steady_clock::now() - start, options.timeout + 5s);
        std::string again = error_of(pg.barrier());
        EXPECT_NE(again.find("failed earlier"), std::string::npos) << again;
      },
      options, "hier");
}
