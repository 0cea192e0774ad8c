// test_collectives_space.cpp - a seeded differential test of every collective of every CPU backend (gloo,
// shm, hier; NCCL's lives in tests/gpu) against a reference computed here from the same random inputs, over
// the sizes where the algorithms split their work: 0, 1, world +- 1, 64-byte multiples +- 1, lengths whose
// per-rank share is already aligned but which the world does not divide, the shm small-message and in-place
// thresholds +- 1, the slot size (one step) and two slots +- 1 (with small slots), primes up to 1.25 MiB and
// seeded random lengths. Every dtype and reduce op, worlds 1-4, all-reduce in plain and in registered memory
// (at offset 0 and inside the buffer), broadcast from every root. All-gather and reduce-scatter (every op)
// over per-rank chunk counts at those boundaries (odd chunks too: the whole buffer is world x chunk, which a
// sharding caller pads to), out of place and in place, in plain memory and in registered memory at offset 0
// and inside the buffer, with guard bytes around every buffer. Ranks must agree bitwise with each other;
// integers equal the reference exactly, floats to the rounding of their dtype. DDP_TEST_SEED=<n> replays
// another draw (the seed is in every failure message).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
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

// `on_caller`: the "<backend>_caller" parameters run every collective on the issuing thread
// (ProcessGroupOptions::run_on_caller) instead of the group's worker thread.
ProcessGroupOptions options(bool on_caller) {
  ProcessGroupOptions o;
  o.timeout = 60s;
  o.debug_collectives = false;
  o.run_on_caller = on_caller;
  return o;
}

const std::string kCallerSuffix = "_caller";
bool runs_on_caller(const std::string& param) {
  return param.size() > kCallerSuffix.size() && param.ends_with(kCallerSuffix);
}
// The backend of a parameter: "shm_caller" -> "shm".
std::string backend_of(const std::string& param) {
  return runs_on_caller(param) ? param.substr(0, param.size() - kCallerSuffix.size()) : param;
}

std::string where(const char* what, int world, const std::string& backend, DType t, int64_t n) {
  return std::string(what) + " of " + std::to_string(n) + " " + std::string(dtype_name(t)) + " on " +
         backend + " world " + std::to_string(world) + " (DDP_TEST_SEED=" + std::to_string(space_seed()) +
         ")";
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
        ASSERT_TRUE(by_rank[r][k] == by_rank[0][k])
            << what << ": rank " << r << " differs bitwise from rank 0 "
            << "in collective " << k;
    }
  }
};

class CollectiveSpace : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  const bool on_caller = runs_on_caller(std::get<0>(GetParam()));
  const std::string backend = backend_of(std::get<0>(GetParam()));
  const int world = std::get<1>(GetParam());
  // Counts up to a little more than one shm slot past its last boundary (the step after a full slot is
  // swept with small slots, AllreduceSmallShmSlots); gloo has no steps of its own size and is the slowest
  // here: its counts stop at 256 KiB.
  std::vector<int64_t> counts(size_t es, size_t shm_slot, std::mt19937_64& rng, int random_count) const {
    const size_t max_bytes = backend == "gloo"               ? size_t{256} << 10
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
    for (int64_t i = 0; i < n; ++i)
      store_element(buf.data, buf.dtype, i, space_input(call, rank, i, buf.dtype));
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
                  CommBuffer b{mem.data() + (n % 2 ? es : 0), n, t, Device::cpu(),
                               nullptr};  // odd: unaligned
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
                CommBuffer range{static_cast<char*>(reg.data) + lead * es, n, t, Device::cpu(),
                                 reg.keepalive};
                check_allreduce(
                    pg, range, call, op, results,
                    lead ? "all-reduce (registered, inside)" : "all-reduce (registered, offset 0)");
              }
              if (::testing::Test::HasFailure()) return;
            }
          }
        },
        options(on_caller), backend);
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
                ADD_FAILURE() << where("broadcast", world, backend, t, n) << " from root " << root
                              << ": rank " << rank << " element " << i;
                return;
              }
            results.add(rank, mem.data(), mem.size());
          }
        }
      },
      options(on_caller), backend);
  results.expect_ranks_agree("broadcast on " + backend);
}

// ------------------------------------------------------------------- all-gather and reduce-scatter

// Where the buffers of one all-gather or reduce-scatter live: the caller's ordinary memory, or memory from
// allocate_comm_buffer (shm: a registered shared-memory buffer) at its start or inside it, as a sharded
// bucket's flat buffer is.
enum class Memory { Plain, RegisteredStart, RegisteredInside };
const char* memory_name(Memory m) {
  return m == Memory::Plain             ? "plain memory"
         : m == Memory::RegisteredStart ? "registered, offset 0"
                                        : "registered, inside";
}

// A buffer of n elements of t with guard bytes (0x5a) before and after it: `lead` elements before (odd: not
// 64-byte aligned) and 5 after; from allocate_comm_buffer for the registered kinds (ordinary memory when the
// backend has none, or below its in-place size, as DDP does).
struct Guarded {
  CommBuffer whole;  // lead + n + 5 elements
  CommBuffer view;   // the n in the middle
  int64_t lead = 0;
  size_t es = 0;
  Guarded(ProcessGroup& pg, int64_t n, DType t, Memory m) : es(dtype_size(t)) {
    lead = m == Memory::RegisteredInside ? 7 : m == Memory::Plain ? 1 : 0;
    const int64_t all = lead + n + 5;
    if (m != Memory::Plain) whole = pg.allocate_comm_buffer(all, t, Device::cpu());
    if (!whole.data) {
      auto mem = std::make_shared<std::vector<char>>(static_cast<size_t>(all) * es);
      whole = CommBuffer{mem->data(), all, t, Device::cpu(), mem};
    }
    std::memset(whole.data, 0x5a, whole.nbytes());
    view = CommBuffer{static_cast<char*>(whole.data) + lead * es, n, t, Device::cpu(), whole.keepalive};
  }
  char* data() const { return static_cast<char*>(view.data); }
  CommBuffer part(int64_t begin, int64_t n) const {
    return CommBuffer{data() + begin * es, n, view.dtype, Device::cpu(), whole.keepalive};
  }
  // The guard bytes are untouched.
  bool guards_intact() const {
    const char* p = static_cast<const char*>(whole.data);
    for (size_t i = 0; i < static_cast<size_t>(lead) * es; ++i)
      if (p[i] != 0x5a) return false;
    for (size_t i = static_cast<size_t>(lead + view.numel) * es; i < whole.nbytes(); ++i)
      if (p[i] != 0x5a) return false;
    return true;
  }
};

class GatherScatterSpace : public CollectiveSpace {
 protected:
  // The per-rank element counts of all-gather and reduce-scatter (the API takes world x chunk elements, a
  // sharding caller pads to that), where their algorithms split the work: the boundary counts of the chunk
  // itself - 0, 1, world +- 1, 64-byte lines +- 1, the shm thresholds +- 1, primes (odd chunks, not whole
  // 64-byte lines: the whole buffer then holds chunks that start anywhere) and one and two shm steps of the
  // collective +- 1, where `step_bytes` is the chunk bytes one shm step moves.
  std::vector<int64_t> chunk_counts(size_t es, size_t slot_bytes, size_t step_bytes,
                                    std::mt19937_64& rng) const {
    std::set<int64_t> out;
    // hier runs both as shm and Gloo collectives of the whole buffer (covered by the all-reduce sweeps): its
    // own logic (blocks per host) has no size boundaries, so it stops where gloo does.
    const size_t max_bytes = backend != "shm"                  ? size_t{256} << 10
                             : slot_bytes >= (size_t{1} << 20) ? slot_bytes + slot_bytes / 4
                                                               : 2 * slot_bytes + slot_bytes / 4;
    // Chunks up to the whole buffer's maximum / world; with small shm slots (SmallShmSlots) up to two steps
    // + 1, so a step after a full one is swept cheaply.
    const bool shm = backend == "shm";
    size_t max_chunk_bytes = max_bytes / static_cast<size_t>(world);
    if (shm && slot_bytes < (size_t{1} << 20))
      max_chunk_bytes = std::max<size_t>(max_chunk_bytes, 2 * step_bytes + 4 * 64);
    for (int64_t c : boundary_counts(world, es, shm ? step_bytes : 0, max_chunk_bytes, rng, 1)) out.insert(c);
    return {out.begin(), out.end()};
  }
  // The shm step of each: all-gather moves a slot of every rank's input a step, reduce-scatter a slot's
  // world-th part of each chunk (shm_group.cpp).
  size_t allgather_step(size_t es, size_t slot_bytes) const { return slot_bytes / es * es; }
  size_t reduce_scatter_step(size_t es, size_t slot_bytes) const {
    return std::max<size_t>(1, slot_bytes / es / static_cast<size_t>(world)) * es;
  }
  // One memory kind per count, turning with the count (the counts of each boundary are neighbours, so each
  // boundary meets every kind).
  static Memory memory_of(size_t k) { return static_cast<Memory>(k % 3); }

  // All-gather, out of place (separate input and output) and in place (the input is this rank's part of
  // the output), over every chunk count of every dtype.
  void allgather_space(size_t slot_bytes) {
    Results results(world);
    run_threads(
        world,
        [&](int rank, ProcessGroup& pg) {
          std::mt19937_64 rng(space_seed() + 200 + static_cast<uint64_t>(world));
          uint64_t call = 2000;
          for (DType t : kSpaceDtypes) {
            const size_t es = dtype_size(t);
            size_t k = 0;
            for (int64_t n : chunk_counts(es, slot_bytes, allgather_step(es, slot_bytes), rng)) {
              const Memory m = memory_of(k++);
              for (bool in_place : {false, true}) {
                ++call;
                Guarded out(pg, world * n, t, m);
                std::optional<Guarded> own;
                if (!in_place) own.emplace(pg, n, t, m);
                CommBuffer in = in_place ? out.part(rank * n, n) : own->view;
                for (int64_t i = 0; i < n; ++i) store_element(in.data, t, i, space_input(call, rank, i, t));
                pg.allgather(in, out.view)->wait();
                const std::string what =
                    where(in_place ? "all-gather (in place)" : "all-gather", world, backend, t, n) + ", " +
                    memory_name(m);
                for (int q = 0; q < world; ++q)
                  for (int64_t i = 0; i < n; ++i)
                    if (load_element(out.data(), t, q * n + i) != space_input(call, q, i, t)) {
                      ADD_FAILURE() << what << ": rank " << rank << " block " << q << " element " << i;
                      return;
                    }
                EXPECT_TRUE(out.guards_intact()) << what << ": wrote outside the output";
                if (own) {
                  EXPECT_TRUE(own->guards_intact()) << what << ": wrote outside the input";
                }
                results.add(rank, out.data(), out.view.nbytes());
              }
              if (::testing::Test::HasFailure()) return;
            }
          }
        },
        options(on_caller), backend);
    results.expect_ranks_agree("all-gather on " + backend);
  }

  // Reduce-scatter with every op, out of place and in place (the output is this rank's chunk of the input).
  void reduce_scatter_space(size_t slot_bytes) {
    run_threads(
        world,
        [&](int rank, ProcessGroup& pg) {
          std::mt19937_64 rng(space_seed() + 300 + static_cast<uint64_t>(world));
          uint64_t call = 3000;
          for (DType t : kSpaceDtypes) {
            const size_t es = dtype_size(t);
            size_t k = 0;
            for (int64_t chunk : chunk_counts(es, slot_bytes, reduce_scatter_step(es, slot_bytes), rng)) {
              // Tiny counts get every op, larger ones one, turning with the count (against the memory kind).
              std::vector<ReduceOp> ops = {kSpaceOps[(k / 3 + k) % 4]};
              if (chunk * world <= 64) ops.assign(std::begin(kSpaceOps), std::end(kSpaceOps));
              const Memory m = memory_of(k++);
              for (ReduceOp op : ops) {
                for (bool in_place : {false, true}) {
                  ++call;
                  Guarded in(pg, world * chunk, t, m);
                  std::optional<Guarded> own;
                  if (!in_place) own.emplace(pg, chunk, t, m);
                  for (int64_t i = 0; i < world * chunk; ++i)
                    store_element(in.data(), t, i, space_input(call, rank, i, t));
                  CommBuffer out = in_place ? in.part(rank * chunk, chunk) : own->view;
                  pg.reduce_scatter(in.view, out, op)->wait();
                  const std::string what = where(in_place ? "reduce-scatter (in place)" : "reduce-scatter",
                                                 world, backend, t, chunk) +
                                           ", " + memory_name(m) + ", " + reduce_op_name(op);
                  for (int64_t i = 0; i < chunk; ++i) {
                    const Expected e = space_reference(call, world, rank * chunk + i, t, op);
                    const double got = load_element(out.data, t, i);
                    if (!(std::abs(got - e.value) <= e.tolerance)) {
                      ADD_FAILURE() << what << ": rank " << rank << " element " << i << " is " << got
                                    << ", expected " << e.value;
                      return;
                    }
                  }
                  if (own) {
                    EXPECT_TRUE(own->guards_intact()) << what << ": wrote outside the output";
                    // Out of place the input is the caller's: left as it was (checked where it is cheap).
                    for (int64_t i = 0; i < world * chunk && world * chunk <= 4096; ++i)
                      if (load_element(in.data(), t, i) != space_input(call, rank, i, t)) {
                        ADD_FAILURE() << what << ": rank " << rank << " input element " << i << " changed";
                        return;
                      }
                  }
                  EXPECT_TRUE(in.guards_intact()) << what << ": wrote outside the input";
                }
              }
              if (::testing::Test::HasFailure()) return;
            }
          }
        },
        options(on_caller), backend);
  }
};

TEST_P(GatherScatterSpace, AllgatherInRankOrder) { allgather_space(size_t{1} << 20); }

TEST_P(GatherScatterSpace, ReduceScatterEveryOp) { reduce_scatter_space(size_t{1} << 20); }

// Small shm steps (as AllreduceSmallShmSlots): chunks of one and two steps +- 1 stay cheap to sweep.
TEST_P(GatherScatterSpace, SmallShmSlots) {
  if (backend != "shm")
    GTEST_SKIP() << "the slot size is shm's (hier's all-reduce sweeps cover its shm part)";
  ::setenv("DDP_SHM_CHUNK_BYTES", "41024", 1);
  allgather_space(41024);
  reduce_scatter_space(41024);
  ::unsetenv("DDP_SHM_CHUNK_BYTES");
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) + "_world" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectiveSpace,
                         ::testing::Combine(::testing::Values("gloo", "shm", "hier", "gloo_caller", "shm_caller"),
                                            ::testing::Values(1, 2, 3, 4)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Backends, GatherScatterSpace,
                         ::testing::Combine(::testing::Values("gloo", "shm", "hier", "gloo_caller", "shm_caller"),
                                            ::testing::Values(1, 2, 3, 4)),
                         param_name);

}  // namespace
