// test_shm_inplace.cpp - the shm group's registered buffers (allocate_comm_buffer) and the in-place
// all-reduce over them (and the in-place reduce-scatter and all-gather): bitwise the same result as the slot
// algorithm for every dtype and op; ranks that pass different buffers or offsets, or unregistered memory,
// fall back to the slot algorithm (right result, group still in step); a rank killed in the middle fails the
// others; the buffers' names leave /dev/shm after their first use, when freed, when the group goes, and a
// crashed process's are removed like its other segments.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <functional>
#include <future>
#include <mutex>

#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/shm/shm_group.h"
#include "runtime/distributed/shm/shm_segment.h"
#include "runtime/distributed/store_server.h"
#include "tests/support/run_process.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;

namespace {

// Our segments (of any pid in `pids`) still in /dev/shm.
std::vector<std::string> segments_of(const std::vector<pid_t>& pids) { return shm::list_segments_of(pids); }
size_t buffer_segments() {  // registered-buffer segments of this process (names end ".b<index>")
  size_t n = 0;
  for (const auto& s : segments_of({::getpid()})) {
    const size_t at = s.rfind(".b");
    n += at != std::string::npos && at + 2 < s.size() &&
         s.find_first_not_of("0123456789", at + 2) == std::string::npos;
  }
  return n;
}

class ShmInPlace : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(segments_of({::getpid()}), std::vector<std::string>{}); }
};

ProcessGroupOptions quick(std::chrono::milliseconds timeout = 30s) {
  ProcessGroupOptions o;
  o.timeout = timeout;
  o.debug_collectives = false;
  return o;
}

ShmProcessGroup& shm_of(ProcessGroup& pg) { return dynamic_cast<ShmProcessGroup&>(pg); }

// Deterministic, rank-dependent values of `dtype` that make float sums round (so the order shows).
void fill(void* p, int64_t n, DType dtype, int rank) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = ((i * 7919 + rank * 104729) % 1000003) / 997.0 - 300.0 + 1.0 / (3 + rank);
    switch (dtype) {
      case DType::F32:
        static_cast<float*>(p)[i] = static_cast<float>(v);
        break;
      case DType::F64:
        static_cast<double*>(p)[i] = v;
        break;
      case DType::BF16:
        static_cast<BFloat16*>(p)[i] = BFloat16::from_float(static_cast<float>(v));
        break;
      case DType::I32:
        static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v * 10);
        break;
      case DType::I64:
        static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v * 1000);
        break;
      default:
        FAIL() << "dtype";
    }
  }
}

// A registered buffer of n elements (its CommBuffer owns the memory).
CommBuffer registered(ProcessGroup& pg, int64_t n, DType dtype) {
  CommBuffer b = pg.allocate_comm_buffer(n, dtype, Device::cpu());
  EXPECT_NE(b.data, nullptr) << "no registered buffer for " << n << " x " << dtype_name(dtype);
  return b;
}
CommBuffer range_of(const CommBuffer& b, int64_t offset, int64_t n) {
  const size_t es = dtype_size(b.dtype);
  return CommBuffer{static_cast<char*>(b.data) + offset * es, n, b.dtype, b.device, b.keepalive};
}

}  // namespace

// Every dtype and op of the contract, worlds 2 and 3, a whole buffer and a range inside one (the rest of the
// buffer untouched): the in-place path gives the same bits as the slot algorithm on ordinary memory.
TEST_F(ShmInPlace, EqualsTheSlotAlgorithmBitwiseForEveryDtypeAndOp) {
  for (int world : {2, 3}) {
    run_threads(
        world,
        [&](int rank, ProcessGroup& pg) {
          for (DType dtype : {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64}) {
            for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
              SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + reduce_op_name(op) + " world " +
                           std::to_string(world));
              const size_t es = dtype_size(dtype);
              const int64_t n = (300 << 10) / static_cast<int64_t>(es) + 13;  // 300 KiB + an odd tail
              CommBuffer reg = registered(pg, n, dtype);
              std::vector<char> plain(n * es);
              fill(reg.data, n, dtype, rank);
              std::memcpy(plain.data(), reg.data, n * es);
              const uint64_t before = shm_of(pg).direct_allreduces();
              pg.allreduce(reg, op)->wait();
              pg.allreduce(CommBuffer{plain.data(), n, dtype, Device::cpu(), nullptr}, op)->wait();
              EXPECT_EQ(shm_of(pg).direct_allreduces(), before + 1) << "the in-place path was not taken";
              EXPECT_EQ(std::memcmp(reg.data, plain.data(), n * es), 0) << "in-place and slot results differ";
              // A range in the middle of the buffer: only it changes.
              const int64_t off = 1000, len = n / 2;
              fill(reg.data, n, dtype, rank);
              std::memcpy(plain.data(), reg.data, n * es);
              pg.allreduce(range_of(reg, off, len), op)->wait();
              pg.allreduce(CommBuffer{plain.data() + off * es, len, dtype, Device::cpu(), nullptr}, op)
                  ->wait();
              EXPECT_EQ(shm_of(pg).direct_allreduces(), before + 2);
              EXPECT_EQ(std::memcmp(reg.data, plain.data(), n * es), 0) << "range: results differ";
            }
          }
        },
        quick(), "shm");
  }
}

// A rank maps its peers' registered buffers on their first in-place all-reduce and unmaps them once its own
// buffer of that index is freed (the next in-place all-reduce notices): a buffer allocated and freed per
// round, five rounds, never leaves more than the live round's peers mapped. Seen failing from round 1 on with
// the unmapping disabled.
TEST_F(ShmInPlace, PeersUnmapTheBuffersOfAFreedIndex) {
  for (int world : {2, 3}) {
    run_threads(
        world,
        [&](int rank, ProcessGroup& pg) {
          ShmProcessGroup& shm = shm_of(pg);
          const int64_t n = 200 << 10;
          for (int round = 0; round < 5; ++round) {
            CommBuffer b = registered(pg, n, DType::F32);
            fill(b.data, n, DType::F32, rank);
            const uint64_t before = shm.direct_allreduces();
            pg.allreduce(b, ReduceOp::Sum)->wait();
            ASSERT_EQ(shm.direct_allreduces(), before + 1) << "round " << round << ": not in place";
            EXPECT_EQ(shm.peer_buffers_mapped(), static_cast<size_t>(world - 1))
                << "rank " << rank << " round " << round
                << ": the freed rounds' peer buffers are still mapped";
          }
        },
        quick(), "shm");
  }
}

// Below the threshold (and at world 1) there is no registered memory: the caller gets data == nullptr.
TEST_F(ShmInPlace, SmallBuffersAndWorldOneGetOrdinaryMemory) {
  run_threads(
      2,
      [&](int, ProcessGroup& pg) {
        EXPECT_EQ(pg.allocate_comm_buffer(1000, DType::F32, Device::cpu()).data, nullptr);  // 4000 bytes
        EXPECT_EQ(pg.allocate_comm_buffer(1 << 20, DType::F32, Device::cuda(0)).data, nullptr);
        EXPECT_NE(pg.allocate_comm_buffer(1 << 20, DType::F32, Device::cpu()).data, nullptr);
      },
      quick(), "shm");
  run_threads(
      1,
      [&](int, ProcessGroup& pg) {
        EXPECT_EQ(pg.allocate_comm_buffer(1 << 20, DType::F32, Device::cpu()).data, nullptr);
      },
      quick(), "shm");
  // The gloo group has nothing better than ordinary memory.
  run_threads(
      2,
      [&](int, ProcessGroup& pg) {
        EXPECT_EQ(pg.allocate_comm_buffer(1 << 20, DType::F32, Device::cpu()).data, nullptr);
      },
      quick(), "gloo");
}

// Ranks that disagree - another offset, another buffer, or ordinary memory on one rank - fall back to the
// slot algorithm: the right sums, and the group stays in step (the next agreeing all-reduce goes in place).
// Sizes of one and of several chunks (the fallback then runs many steps).
TEST_F(ShmInPlace, DisagreeingRanksFallBackToTheSlotAlgorithm) {
  for (int64_t n : {int64_t{20000}, int64_t{700000}}) {  // 80 KB; 2.8 MB = 3 chunks of 1 MiB
    SCOPED_TRACE(n);
    run_threads(
        3,
        [&](int rank, ProcessGroup& pg) {
          ShmProcessGroup& shm = shm_of(pg);
          auto check = [&](const float* v, const char* what) {
            for (int64_t i = 0; i < n; ++i)
              if (v[i] != 6.0f) {
                ADD_FAILURE() << what << ": element " << i << " is " << v[i] << ", expected 6";
                return;
              }
          };
          auto set = [&](CommBuffer b, float x) { std::fill_n(static_cast<float*>(b.data), b.numel, x); };
          // Rank 1 allocates one buffer more (index 2) and passes it where the others pass `main` (index 0).
          CommBuffer main = registered(pg, n + 64, DType::F32);
          CommBuffer second = registered(pg, n + 64, DType::F32);
          CommBuffer extra;
          if (rank == 1) extra = registered(pg, n + 64, DType::F32);
          const uint64_t d0 = shm.direct_allreduces();
          // 1. Different buffer index on rank 1.
          CommBuffer first = range_of(rank == 1 ? extra : main, 0, n);
          set(first, rank + 1.0f);
          pg.allreduce(first)->wait();
          check(static_cast<float*>(first.data), "different buffer index");
          // 2. Rank 2 at another offset (the same index on ranks 0 and 2, at least).
          const int64_t off = rank == 2 ? 64 : 0;
          set(range_of(second, off, n), rank + 1.0f);
          pg.allreduce(range_of(second, off, n))->wait();
          check(static_cast<float*>(second.data) + off, "different offset");
          // 3. Rank 0 passes ordinary memory.
          std::vector<float> plain(n);
          CommBuffer b = rank == 0 ? CommBuffer{plain.data(), n, DType::F32, Device::cpu(), nullptr}
                                   : range_of(second, 0, n);
          set(b, rank + 1.0f);
          pg.allreduce(b)->wait();
          check(static_cast<float*>(b.data), "ordinary memory on rank 0");
          EXPECT_EQ(shm.direct_allreduces(), d0) << "a disagreeing all-reduce went in place";
          // 4. Everyone agrees (second, offset 0): in place again.
          set(range_of(second, 0, n), rank + 1.0f);
          pg.allreduce(range_of(second, 0, n))->wait();
          check(static_cast<float*>(second.data), "agreeing again");
          EXPECT_EQ(shm.direct_allreduces(), d0 + 1);
          // Collectives of every other kind still line up.
          std::vector<float> g(3 * 4, 0), one(4, rank + 1.0f);
          pg.allgather(comm_buffer(one.data(), 4), comm_buffer(g.data(), 12))->wait();
          EXPECT_EQ(g[4], 2.0f);
          pg.barrier()->wait();
        },
        quick(), "shm");
  }
}

// Reduce-scatter and all-gather of registered inputs read the peers' buffers in place (worlds 2 and 3,
// odd chunks, one step and several steps' worth): in place and out of place give the slot algorithm's
// result, counted as in-place; an all-gather's input may be each rank's own chunk of a registered output (a
// different offset on every rank). Ranks that disagree (one rank's input in ordinary memory; a reduce-scatter
// at different offsets) fall back to the slot algorithm with the same result.
TEST_F(ShmInPlace, ReduceScatterAndAllgatherReadRegisteredInputsInPlace) {
  for (int world : {2, 3}) {
    for (int64_t chunk : {int64_t{9001}, int64_t{300007}}) {  // 36 KB per rank; 1.2 MB: several steps
      SCOPED_TRACE("world " + std::to_string(world) + ", chunk " + std::to_string(chunk));
      run_threads(
          world,
          [&](int rank, ProcessGroup& pg) {
            ShmProcessGroup& shm = shm_of(pg);
            const int64_t n = world * chunk;
            const float sum = world * (world + 1) / 2.0f;
            auto expect_all = [&](const float* v, int64_t count, float x, const char* what) {
              for (int64_t i = 0; i < count; ++i)
                if (v[i] != x) {
                  ADD_FAILURE() << what << ": rank " << rank << " element " << i << " is " << v[i]
                                << ", expected " << x;
                  return;
                }
            };
            auto expect_blocks = [&](const float* v, const char* what) {
              for (int q = 0; q < world; ++q) expect_all(v + q * chunk, chunk, q + 1.0f, what);
            };
            auto set = [&](CommBuffer b, float x) { std::fill_n(static_cast<float*>(b.data), b.numel, x); };
            CommBuffer whole = registered(pg, n + 5, DType::F32);  // a flat bucket with a little slack
            CommBuffer shard = registered(pg, chunk + 3, DType::F32);
            std::vector<float> plain(static_cast<size_t>(chunk));
            const uint64_t d0 = shm.direct_gather_scatters();
            // Reduce-scatter, out of place into a registered shard at offset 3.
            set(range_of(whole, 0, n), rank + 1.0f);
            pg.reduce_scatter(range_of(whole, 0, n), range_of(shard, 3, chunk))->wait();
            expect_all(static_cast<float*>(shard.data) + 3, chunk, sum, "reduce-scatter out of place");
            expect_all(static_cast<float*>(whole.data), n, rank + 1.0f, "reduce-scatter's input afterwards");
            // In place, at offset 5 of the bucket (the same on every rank), Avg.
            set(range_of(whole, 5, n), rank + 1.0f);
            pg.reduce_scatter(range_of(whole, 5, n), range_of(whole, 5 + rank * chunk, chunk), ReduceOp::Avg)
                ->wait();
            expect_all(static_cast<float*>(whole.data) + 5 + rank * chunk, chunk, sum / world,
                       "reduce-scatter in place");
            // All-gather in place: each rank's input is its chunk of the registered output.
            set(range_of(whole, 0, n), -1.0f);
            set(range_of(whole, rank * chunk, chunk), rank + 1.0f);
            pg.allgather(range_of(whole, rank * chunk, chunk), range_of(whole, 0, n))->wait();
            expect_blocks(static_cast<float*>(whole.data), "all-gather in place");
            // Out of place from the registered shard into ordinary memory.
            std::vector<float> out(static_cast<size_t>(n), -1.0f);
            set(range_of(shard, 3, chunk), rank + 1.0f);
            pg.allgather(range_of(shard, 3, chunk), comm_buffer(out.data(), n))->wait();
            expect_blocks(out.data(), "all-gather out of place");
            EXPECT_EQ(shm.direct_gather_scatters(), d0 + 4) << "not every one went in place";
            // Disagreement: rank 0's all-gather input in ordinary memory; reduce-scatter at per-rank offsets.
            std::fill(plain.begin(), plain.end(), rank + 1.0f);
            set(range_of(shard, 3, chunk), rank + 1.0f);
            pg.allgather(rank == 0 ? comm_buffer(plain.data(), chunk) : range_of(shard, 3, chunk),
                         comm_buffer(out.data(), n))
                ->wait();
            expect_blocks(out.data(), "all-gather, rank 0 in ordinary memory");
            const int64_t off = rank == world - 1 ? 5 : 0;
            set(range_of(whole, off, n), rank + 1.0f);
            pg.reduce_scatter(range_of(whole, off, n), comm_buffer(plain.data(), chunk))->wait();
            expect_all(plain.data(), chunk, sum, "reduce-scatter at different offsets");
            EXPECT_EQ(shm.direct_gather_scatters(), d0 + 4) << "a disagreeing collective went in place";
            pg.barrier()->wait();
          },
          quick(), "shm");
    }
  }
}

// Registered buffers' names: present while unused, gone after the first in-place all-reduce (every peer
// mapped it then), gone when freed unused, gone when the group is destroyed; the memory itself stays usable
// for as long as the caller holds it.
TEST_F(ShmInPlace, BufferNamesLeaveDevShmAfterUseFreeAndGroupEnd) {
  CommBuffer survivor;
  std::mutex mu;
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg, Store& store) {
        auto sync = [&](const std::string& k) {
          store.set(k + std::to_string(rank), "1");
          store.wait({k + "0", k + "1"}, 30s);
        };
        CommBuffer used = registered(pg, 100000, DType::F32);
        CommBuffer unused = registered(pg, 100000, DType::F32);
        CommBuffer kept = registered(pg, 100000, DType::F32);
        // Both ranks look, then both go on.
        auto expect_buffers = [&](const std::string& k, size_t n) {
          sync(k);
          EXPECT_EQ(buffer_segments(), n) << k;
          sync(k + "seen/");
        };
        expect_buffers("allocated/", 6);  // 3 per rank, named until used
        pg.allreduce(used)->wait();
        expect_buffers("used/", 4);
        unused = {};  // freed without ever being used
        expect_buffers("freed/", 2);
        if (rank == 0) {
          std::lock_guard<std::mutex> g(mu);
          survivor = kept;
        }
      },
      quick(), "shm");
  EXPECT_EQ(buffer_segments(), 0u) << "the group's end did not unlink its buffers";
  ASSERT_NE(survivor.data, nullptr);
  static_cast<float*>(survivor.data)[99999] = 1.0f;  // still mapped
  survivor = {};
}

namespace {
// Runs `world` shm_worker processes in `mode`; `while_running` (optional) is called on this thread once they
// are started, with a function that gives their pids so far (0: not started yet).
std::vector<ddp::testing::ProcessResult> run_workers(
    int world, const std::string& mode, std::vector<pid_t>& pids,
    const std::function<void(const std::function<std::vector<pid_t>()>&)>& while_running = {}) {
  const std::string token = "shm-inplace-test";
  StoreServer server("127.0.0.1", 0, token);
  std::vector<std::future<ddp::testing::ProcessResult>> runs;
  pids.assign(world, 0);
  std::mutex mu;
  const int port = server.port();
  for (int r = 0; r < world; ++r) {
    ddp::testing::ProcessOptions opt;
    opt.timeout_s = 120;
    opt.on_start = [&, r](pid_t p) {
      std::lock_guard<std::mutex> g(mu);
      pids[r] = p;
    };
    runs.push_back(std::async(std::launch::async, [r, port, token, world, opt, mode] {
      return ddp::testing::run_process(
          {std::string(DDP_BIN_DIR) + "/testprog_shm_worker", std::to_string(port), token, std::to_string(r),
           std::to_string(world), mode},
          opt);
    }));
  }
  if (while_running)
    while_running([&] {
      std::lock_guard<std::mutex> g(mu);
      return pids;
    });
  std::vector<ddp::testing::ProcessResult> res;
  for (auto& f : runs) res.push_back(f.get());
  return res;
}
}  // namespace

// Processes: rank 1 is SIGKILLed inside an in-place all-reduce of a 16 MiB registered buffer (issued, waiting
// for the peers), ranks 0 and 2 enter it afterwards and fail with an error naming its death long before the
// 60 s timeout, not a hang and not a half-reduced success.
TEST_F(ShmInPlace, RankKilledInsideAnInPlaceAllreduceFailsTheOthers) {
  std::vector<pid_t> pids;
  auto res = run_workers(3, "die-inplace", pids);
  auto all = [&] { return ddp::testing::describe_ranks(res); };
  EXPECT_EQ(res[1].exit_code, 128 + SIGKILL) << all();
  for (int r : {0, 2}) {
    EXPECT_FALSE(res[r].timed_out) << all();
    EXPECT_EQ(res[r].exit_code, 3) << all();
    EXPECT_NE(res[r].err.find("shm allreduce #1 (4194304 x float32 on cpu, sum)"), std::string::npos)
        << all();
    EXPECT_NE(res[r].err.find(" died"), std::string::npos) << all();
    EXPECT_NE(res[r].out.find("in place: 1"), std::string::npos) << "the warm-up did not go in place\n"
                                                                 << all();
  }
  EXPECT_EQ(segments_of(pids), std::vector<std::string>{}) << all();
}

// A process that dies with registered buffers never used leaves their names; ddprun's sweep of its workers'
// segments (remove_segments_of) removes them. The workers wait after creating their buffers and are
// SIGKILLed here once both names are seen: any shm group starting on the host (another test running in
// parallel) sweeps the segments of dead processes too, so names are looked for only while their owners live.
TEST_F(ShmInPlace, BuffersOfACrashedProcessAreRemovedByTheSweep) {
  std::vector<pid_t> pids;
  std::vector<std::string> left;
  auto res = run_workers(2, "setup-buffers", pids, [&](const std::function<std::vector<pid_t>()>& current) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::vector<pid_t> now;
    size_t buffers = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      now = current();
      if (std::count(now.begin(), now.end(), 0) == 0) {
        left = segments_of(now);
        buffers = std::count_if(left.begin(), left.end(),
                                [](const std::string& n) { return n.find(".b0") != std::string::npos; });
        if (buffers == 2) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(buffers, 2u) << "expected each rank's buffer 0 in /dev/shm while the ranks live";
    for (pid_t p : now)
      if (p > 0) ::kill(p, SIGKILL);
  });
  for (auto& r : res) ASSERT_EQ(r.exit_code, 128 + SIGKILL) << r.out << r.err;
  auto removed = shm::remove_segments_of(pids);
  // Another group's sweep may have taken some first; whatever this one removed was the workers'.
  for (const auto& n : removed) EXPECT_NE(std::find(left.begin(), left.end(), n), left.end()) << n;
  EXPECT_EQ(segments_of(pids), std::vector<std::string>{});
}

TEST_F(ShmInPlace, BadThresholdIsRefusedByName) {
  setenv("DDP_SHM_DIRECT_MIN_BYTES", "lots", 1);
  std::string err;
  try {
    run_threads(
        1, [](int, ProcessGroup&) {}, quick(10s), "shm");
  } catch (const Error& e) {
    err = e.what();
  }
  unsetenv("DDP_SHM_DIRECT_MIN_BYTES");
  EXPECT_NE(err.find("DDP_SHM_DIRECT_MIN_BYTES='lots' is not valid"), std::string::npos) << err;
}

// /dev/shm cannot hold a buffer (here 1 TiB): ordinary memory instead (data == nullptr, a warning), no
// SIGBUS at the first write, nothing left in /dev/shm, and the next buffer still goes in place (the failed
// allocation used up its index on every rank alike).
TEST_F(ShmInPlace, ABufferDevShmCannotHoldGetsOrdinaryMemory) {
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg) {
        EXPECT_EQ(pg.allocate_comm_buffer(int64_t{1} << 38, DType::F32, Device::cpu()).data, nullptr);
        CommBuffer b = registered(pg, 100000, DType::F32);
        std::fill_n(static_cast<float*>(b.data), b.numel, rank + 1.0f);
        pg.allreduce(b)->wait();
        EXPECT_EQ(static_cast<float*>(b.data)[99999], 3.0f);
        EXPECT_EQ(shm_of(pg).direct_allreduces(), 1u);
      },
      quick(), "shm");
}
