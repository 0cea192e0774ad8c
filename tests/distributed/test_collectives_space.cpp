// test_collectives_space.cpp - a seeded differential test of every collective of every CPU backend (gloo, shm,
// hier; NCCL's lives in tests/gpu) against a reference computed here from the same random inputs, over the
// sizes where the algorithms split their work: 0, 1, world +- 1, 64-byte multiples +- 1, lengths whose
// per-rank share is already aligned but which the world does not divide, the shm small-message and in-place
// thresholds +- 1, the slot size (one step) and two slots +- 1 (with small slots), primes up to 1.25 MiB and
// seeded random lengths. Every dtype and reduce op, worlds 1-4, all-reduce in plain and in registered memory (at offset 0
// and inside the buffer), broadcast from every root, all-gather and reduce-scatter out of place and in place.
// Ranks must agree bitwise with each other; integers equal the reference exactly, floats to the rounding of
// their dtype. DDP_TEST_SEED=<n> replays another draw (the seed is in every failure message).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/distributed/local_world.h"
#include "tests/support/collective_space.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;
using namespace ddp::testing;

namespace {

// ----------------------------------------------------------------------------------- the test harness

ProcessGroupOptions options() {
  ProcessGroupOptions o;
  o.timeout = 60s;
  o.debug_collectives = false;
  return o;
}

std::string where(const char* what, int world, const std::string& backend, DType t, int64_t n) {
  return std::string(what) + " of " + std::to_string(n) + " " + std::string(dtype_name(t)) + " on " + backend + " world " +
         std::to_string(world) + " (DDP_TEST_SEED=" + std::to_string(space_seed()) + ")";
}

// What each rank saw, for the bitwise comparison between ranks after the threads joined.
struct Results {
  std::mutex mu;
  std::vector<std::vector<std::vector<char>>> by_rank;  // [rank][collective] bytes
  explicit Results(int world) : by_rank(world) {}
  void add(int rank, const void* p, size_t bytes) {
    std::lock_guard<std::mutex> g(mu);
    by_rank[rank].emplace_back(static_cast<const char*>(p), static_cast<const char*>(p) + bytes);
  }
  void expect_ranks_agree(const std::string& what) {
    for (size_t r = 1; r < by_rank.size(); ++r) {
      ASSERT_EQ(by_rank[r].size(), by_rank[0].size()) << what;
      for (size_t k = 0; k < by_rank[0].size(); ++k)
        ASSERT_TRUE(by_rank[r][k] == by_rank[0][k]) << what << ": rank " << r << " differs bitwise from rank 0 "
                                                    << "in collective " << k;
    }
  }
};

class CollectiveSpace : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  const std::string backend = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  // Counts up to a little more than one shm slot past its last boundary (the step after a full slot is
  // swept with small slots, AllreduceSmallShmSlots); gloo has no steps of its own size and is the slowest
  // here: its counts stop at 256 KiB.
  std::vector<int64_t> counts(size_t es, size_t shm_slot, std::mt19937_64& rng, int random_count) const {
    const size_t max_bytes = backend == "gloo"            ? size_t{256} << 10
                             : shm_slot >= (size_t{1} << 20) ? shm_slot + shm_slot / 4
                                                           : 2 * shm_slot + shm_slot / 4;
    return boundary_counts(world, es, backend == "gloo" ? 0 : shm_slot, max_bytes, rng, random_count);
  }

  // One all-reduce of n elements of t with op on every rank, in `data` (this rank's memory), checked
  // against the reference; appends the result for the cross-rank comparison.
  void check_allreduce(ProcessGroup& pg, CommBuffer buf, uint64_t call, ReduceOp op, Results& results,
                       const char* what) {
    const int rank = pg.rank();
    const int64_t n = buf.numel;
    for (int64_t i = 0; i < n; ++i) store_element(buf.data, buf.dtype, i, space_input(call, rank, i, buf.dtype));
    pg.allreduce(buf, op)->wait();
    for (int64_t i = 0; i < n; ++i) {
      const Expected e = space_reference(call, world, i, buf.dtype, op);
      const double got = load_element(buf.data, buf.dtype, i);
      if (!(std::abs(got - e.value) <= e.tolerance)) {
        ADD_FAILURE() << where(what, world, backend, buf.dtype, n) << " " << reduce_op_name(op) << ": rank "
                      << rank << " element " << i << " is " << got << ", expected " << e.value;
        return;
      }
    }
    results.add(rank, buf.data, buf.nbytes());
  }

  // All-reduce over every boundary count of every dtype and op; `slot_bytes` is the shm step size in use.
  void allreduce_space(size_t slot_bytes, bool registered) {
    Results results(world);
    run_threads(
        world,
        [&](int, ProcessGroup& pg) {
          std::mt19937_64 rng(space_seed() + static_cast<uint64_t>(world));  // the same draw on every rank
          uint64_t call = 0;
          for (DType t : kSpaceDtypes) {
            const size_t es = dtype_size(t);
            for (int64_t n : counts(es, slot_bytes, rng, 2)) {
              // Small counts get every op; larger ones one op, turning with the count.
              std::vector<ReduceOp> ops = {kSpaceOps[n % 4]};
              if (n * es <= 2 * kSmallAllreduceBytes) ops.assign(std::begin(kSpaceOps), std::end(kSpaceOps));
              for (ReduceOp op : ops) {
                ++call;
                if (!registered) {
                  std::vector<char> mem(n * es + 64);
                  CommBuffer b{mem.data() + (n % 2 ? es : 0), n, t, Device::cpu(), nullptr};  // odd: unaligned
                  check_allreduce(pg, b, call, op, results, "all-reduce (plain memory)");
                  continue;
                }
                // Registered: the whole buffer (even counts) or a range inside it (odd counts; DDP's buckets
                // are such ranges).
                const int64_t lead = n % 2 == 0 ? 0 : 7;
                CommBuffer reg = pg.allocate_comm_buffer(n + lead + 5, t, Device::cpu());
                if (!reg.data) {  // below the in-place size (or world 1): ordinary memory, as DDP does
                  auto mem = std::make_shared<std::vector<char>>((n + lead + 5) * es);
                  reg = CommBuffer{mem->data(), n + lead + 5, t, Device::cpu(), mem};
                }
                CommBuffer range{static_cast<char*>(reg.data) + lead * es, n, t, Device::cpu(), reg.keepalive};
                check_allreduce(pg, range, call, op, results,
                                lead ? "all-reduce (registered, inside)" : "all-reduce (registered, offset 0)");
              }
              if (::testing::Test::HasFailure()) return;
            }
          }
        },
        options(), backend);
    results.expect_ranks_agree("all-reduce on " + backend);
  }
};

TEST_P(CollectiveSpace, AllreducePlainMemory) { allreduce_space(size_t{1} << 20, false); }

TEST_P(CollectiveSpace, AllreduceRegisteredMemory) {
  if (backend != "shm") GTEST_SKIP() << backend << " has no registered memory";
  allreduce_space(size_t{1} << 20, true);
}

// Small shm steps: 41024 bytes (past the 32 KiB small-message size, not a power of two), so counts of two
// slots and more, a full step followed by a short one of either path, stay cheap to sweep.
TEST_P(CollectiveSpace, AllreduceSmallShmSlots) {
  if (backend == "gloo") GTEST_SKIP() << "the slot size is shm's";
  ::setenv("DDP_SHM_CHUNK_BYTES", "41024", 1);
  allreduce_space(41024, false);
  allreduce_space(41024, true);
  ::unsetenv("DDP_SHM_CHUNK_BYTES");
}

TEST_P(CollectiveSpace, BroadcastFromEveryRoot) {
  Results results(world);
  run_threads(
      world,
      [&](int rank, ProcessGroup& pg) {
        std::mt19937_64 rng(space_seed() + 100 + static_cast<uint64_t>(world));
        uint64_t call = 1000;
        for (DType t : {DType::F32, DType::F64, DType::BF16, DType::I64}) {
          const size_t es = dtype_size(t);
          for (int64_t n : counts(es, size_t{1} << 20, rng, 1)) {
            const int root = static_cast<int>(++call % world);
            std::vector<char> mem(n * es);
            for (int64_t i = 0; i < n; ++i) store_element(mem.data(), t, i, space_input(call, rank, i, t));
            pg.broadcast(CommBuffer{mem.data(), n, t, Device::cpu(), nullptr}, root)->wait();
            for (int64_t i = 0; i < n; ++i)
              if (load_element(mem.data(), t, i) != space_input(call, root, i, t)) {
                ADD_FAILURE() << where("broadcast", world, backend, t, n) << " from root " << root << ": rank "
                              << rank << " element " << i;
                return;
              }
            results.add(rank, mem.data(), mem.size());
          }
        }
      },
      options(), backend);
  results.expect_ranks_agree("broadcast on " + backend);
}

// Out of place (separate input and output) and in place (the input is this rank's part of the output).
TEST_P(CollectiveSpace, AllgatherInRankOrder) {
  Results results(world);
  run_threads(
      world,
      [&](int rank, ProcessGroup& pg) {
        std::mt19937_64 rng(space_seed() + 200 + static_cast<uint64_t>(world));
        uint64_t call = 2000;
        for (DType t : kSpaceDtypes) {
          const size_t es = dtype_size(t);
          for (int64_t total : counts(es, size_t{1} << 20, rng, 1)) {
            const int64_t n = total / world;  // per rank: the output holds world * n
            for (bool in_place : {false, true}) {
              ++call;
              std::vector<char> out(world * n * es + 1, 0x5a), own(n * es);
              char* in = in_place ? out.data() + rank * n * es : own.data();
              for (int64_t i = 0; i < n; ++i) store_element(in, t, i, space_input(call, rank, i, t));
              pg.allgather(CommBuffer{in, n, t, Device::cpu(), nullptr},
                           CommBuffer{out.data(), world * n, t, Device::cpu(), nullptr})
                  ->wait();
              for (int q = 0; q < world; ++q)
                for (int64_t i = 0; i < n; ++i)
                  if (load_element(out.data(), t, q * n + i) != space_input(call, q, i, t)) {
                    ADD_FAILURE() << where(in_place ? "all-gather (in place)" : "all-gather", world, backend, t, n)
                                  << ": rank " << rank << " block " << q << " element " << i;
                    return;
                  }
              EXPECT_EQ(out.back(), 0x5a) << "wrote past the output";
              results.add(rank, out.data(), out.size());
            }
          }
        }
      },
      options(), backend);
  results.expect_ranks_agree("all-gather on " + backend);
}

TEST_P(CollectiveSpace, ReduceScatterEveryOp) {
  run_threads(
      world,
      [&](int rank, ProcessGroup& pg) {
        std::mt19937_64 rng(space_seed() + 300 + static_cast<uint64_t>(world));
        uint64_t call = 3000;
        for (DType t : kSpaceDtypes) {
          const size_t es = dtype_size(t);
          for (int64_t total : counts(es, size_t{1} << 20, rng, 1)) {
            const int64_t chunk = total / world;  // the input holds world * chunk
            const ReduceOp op = kSpaceOps[(call / 2) % 4];
            for (bool in_place : {false, true}) {
              ++call;
              std::vector<char> in(world * chunk * es), own(chunk * es + 1, 0x5a);
              for (int64_t i = 0; i < world * chunk; ++i) store_element(in.data(), t, i, space_input(call, rank, i, t));
              char* out = in_place ? in.data() + rank * chunk * es : own.data();
              pg.reduce_scatter(CommBuffer{in.data(), world * chunk, t, Device::cpu(), nullptr},
                                CommBuffer{out, chunk, t, Device::cpu(), nullptr}, op)
                  ->wait();
              for (int64_t i = 0; i < chunk; ++i) {
                const Expected e = space_reference(call, world, rank * chunk + i, t, op);
                const double got = load_element(out, t, i);
                if (!(std::abs(got - e.value) <= e.tolerance)) {
                  ADD_FAILURE() << where(in_place ? "reduce-scatter (in place)" : "reduce-scatter", world,
                                         backend, t, chunk)
                                << " " << reduce_op_name(op) << ": rank " << rank << " element " << i << " is "
                                << got << ", expected " << e.value;
                  return;
                }
              }
              if (!in_place) {
                EXPECT_EQ(own.back(), 0x5a) << "wrote past the output";
              }
            }
          }
        }
      },
      options(), backend);
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectiveSpace,
                         ::testing::Combine(::testing::Values("gloo", "shm", "hier"), ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
