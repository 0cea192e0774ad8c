// test_collectives.cpp - the collectives of every CPU backend (gloo, shm, hier: see run_threads) on
// thread-ranks for world sizes 1-4: every CPU dtype and reduce op, sizes 0, 1, odd, several shared-memory
// chunks and > 1M elements, many collectives outstanding at once. Integers are checked exactly, floats to
// the rounding of their dtype, against references computed here from the same inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/shm/shm_segment.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;

namespace {

ProcessGroupOptions test_options() {
  ProcessGroupOptions o;
  o.timeout = 30s;
  o.debug_collectives = false;
  return o;
}

// Input of rank r, element i: small integers (exact in every dtype, bfloat16 included), negative ones too.
double input_value(int rank, int64_t i) { return static_cast<double>((i * 7 + rank * 5) % 23) - 9.0; }

template <class T>
T to_t(double v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16::from_float(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <class T>
double from_t(T v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return v.to_float();
  } else {
    return static_cast<double>(v);
  }
}

// Reference reduction over ranks of element i, with the dtype's own arithmetic for the average.
template <class T>
double reference(ReduceOp op, int world, int64_t i) {
  double acc = input_value(0, i);
  for (int r = 1; r < world; ++r) {
    double v = input_value(r, i);
    if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc += v;
    if (op == ReduceOp::Max) acc = std::max(acc, v);
    if (op == ReduceOp::Min) acc = std::min(acc, v);
  }
  if (op == ReduceOp::Avg) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<double>(static_cast<T>(acc) / static_cast<T>(world));
    return acc / world;
  }
  return acc;
}

template <class T>
double tolerance(double expected) {
  if constexpr (std::is_integral_v<T>) return 0.0;
  if constexpr (std::is_same_v<T, BFloat16>) return std::abs(expected) / 128.0;  // 8 bits of mantissa
  if constexpr (std::is_same_v<T, float>) return std::abs(expected) * 1e-6;
  return std::abs(expected) * 1e-14;
}

template <class T>
void check_allreduce(const std::string& backend, int world, const std::vector<int64_t>& sizes) {
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
  run_threads(
      world,
      [&](int rank, ProcessGroup& pg) {
        // Issue everything first (many outstanding), then wait in reverse order.
        std::vector<std::vector<T>> bufs;
        std::vector<std::shared_ptr<Work>> works;
        for (ReduceOp op : ops) {
          for (int64_t n : sizes) {
            std::vector<T> b(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) b[i] = to_t<T>(input_value(rank, i));
            bufs.push_back(std::move(b));
            works.push_back(pg.allreduce(comm_buffer(bufs.back().data(), n), op));
          }
        }
        for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
        size_t k = 0;
        for (ReduceOp op : ops) {
          for (int64_t n : sizes) {
            const auto& b = bufs[k++];
            for (int64_t i = 0; i < n; ++i) {
              double want = reference<T>(op, world, i);
              ASSERT_NEAR(from_t(b[i]), want, tolerance<T>(want))
                  << dtype_name(dtype_of<T>::value) << " " << reduce_op_name(op) << " n=" << n << " i=" << i
                  << " rank " << rank << " world " << world << " " << backend;
            }
          }
        }
      },
      test_options(), backend);
}

}  // namespace

const std::vector<std::string> kBackends = {"gloo", "shm", "hier"};

// The shm groups unlink their segments once mapped: nothing of this process is left in /dev/shm.
void expect_no_shm_segments_of_this_process() {
  const std::string mine = shm::segment_prefix_of(::getpid());
  for (const auto& n : shm::list_segments()) EXPECT_NE(n.rfind(mine, 0), 0u) << "left in /dev/shm: " << n;
}

class CollectivesByWorld : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void TearDown() override { expect_no_shm_segments_of_this_process(); }
  const std::string backend = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
};

TEST_P(CollectivesByWorld, AllreduceEveryDtypeAndOp) {
  // 9000 float64 = 72 KB: past the small-message path of shm (32 KiB), with parts per rank.
  const std::vector<int64_t> sizes = {0, 1, 7, 1001, 9000};
  check_allreduce<float>(backend, world, sizes);
  check_allreduce<double>(backend, world, sizes);
  check_allreduce<int32_t>(backend, world, sizes);
  check_allreduce<int64_t>(backend, world, sizes);
  check_allreduce<BFloat16>(backend, world, sizes);
}

TEST_P(CollectivesByWorld, BroadcastFromEveryRoot) {
  run_threads(
      world,
      [&](int rank, ProcessGroup& pg) {
        for (int root = 0; root < world; ++root) {
          for (int64_t n : {0, 1, 9}) {
            std::vector<int64_t> a(n);
            std::vector<double> b(n);
            for (int64_t i = 0; i < n; ++i) {
              a[i] = rank * 1000 + i;
              b[i] = rank + 0.25 * static_cast<double>(i);
            }
            auto w1 = pg.broadcast(comm_buffer(a.data(), n), root);
            auto w2 = pg.broadcast(comm_buffer(b.data(), n), root);
            w2->wait();
            w1->wait();
            for (int64_t i = 0; i < n; ++i) {
              ASSERT_EQ(a[i], root * 1000 + i);
              ASSERT_EQ(b[i], root + 0.25 * static_cast<double>(i));
            }
          }
        }
      },
      test_options(), backend);
}

TEST_P(CollectivesByWorld, AllgatherInRankOrder) {
  run_threads(
      world,
      [&](int rank, ProcessGroup& pg) {
        for (int64_t n : {0, 1, 5}) {
          std::vector<int32_t> in(n);
          for (int64_t i = 0; i < n; ++i) in[i] = rank * 100 + static_cast<int32_t>(i);
          std::vector<int32_t> out(n * world, -1);
          std::vector<float> fin(n, static_cast<float>(rank) + 0.5f), fout(n * world, -1.f);
          auto w1 = pg.allgather(comm_buffer(in.data(), n), comm_buffer(out.data(), n * world));
          auto w2 = pg.allgather(comm_buffer(fin.data(), n), comm_buffer(fout.data(), n * world));
          w1->wait();
          w2->wait();
          for (int r = 0; r < world; ++r)
            for (int64_t i = 0; i < n; ++i) {
              ASSERT_EQ(out[r * n + i], r * 100 + i);
              ASSERT_EQ(fout[r * n + i], static_cast<float>(r) + 0.5f);
            }
        }
      },
      test_options(), backend);
}

TEST_P(CollectivesByWorld, ReduceScatterEveryOp) {
  run_threads(
      world,
      [&](int rank, ProcessGroup& pg) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
          for (int64_t chunk : {0, 1, 3}) {
            const int64_t n = chunk * world;
            std::vector<int64_t> in(n);
            std::vector<double> din(n);
            for (int64_t i = 0; i < n; ++i) {
              in[i] = static_cast<int64_t>(input_value(rank, i));
              din[i] = input_value(rank, i);
            }
            std::vector<int64_t> out(chunk, -99);
            std::vector<double> dout(chunk, -99);
            auto w1 = pg.reduce_scatter(comm_buffer(in.data(), n), comm_buffer(out.data(), chunk), op);
            auto w2 = pg.reduce_scatter(comm_buffer(din.data(), n), comm_buffer(dout.data(), chunk), op);
            w1->wait();
            w2->wait();
            for (int64_t i = 0; i < chunk; ++i) {
              int64_t global = rank * chunk + i;
              ASSERT_EQ(static_cast<double>(out[i]), reference<int64_t>(op, world, global))
                  << reduce_op_name(op) << " i=" << i;
              double want = reference<double>(op, world, global);
              ASSERT_NEAR(dout[i], want, tolerance<double>(want)) << reduce_op_name(op) << " i=" << i;
            }
          }
        }
      },
      test_options(), backend);
}

TEST_P(CollectivesByWorld, BarrierWaitsForEveryRank) {
  run_threads(
      world,
      [&](int rank, ProcessGroup& pg, Store& store) {
        store.set("before-barrier/" + std::to_string(rank), "1");
        pg.barrier()->wait();
        for (int r = 0; r < world; ++r)
          EXPECT_TRUE(store.try_get("before-barrier/" + std::to_string(r)).has_value()) << "rank " << r;
      },
      test_options(), backend);
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectivesByWorld,
                         ::testing::Combine(::testing::ValuesIn(kBackends), ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" + std::to_string(std::get<1>(info.param));
                         });

class Collectives : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override { expect_no_shm_segments_of_this_process(); }
  const std::string backend = GetParam();
};

TEST_P(Collectives, MoreThanAMillionElements) {
  const int64_t n = (int64_t{1} << 20) + 3;
  run_threads(
      3,
      [&](int rank, ProcessGroup& pg) {
        std::vector<float> f(n);
        std::vector<int32_t> m(n);
        for (int64_t i = 0; i < n; ++i) {
          f[i] = static_cast<float>(input_value(rank, i));
          m[i] = static_cast<int32_t>(i % 1000) * (rank + 1);
        }
        auto w1 = pg.allreduce(comm_buffer(f.data(), n), ReduceOp::Sum);
        auto w2 = pg.allreduce(comm_buffer(m.data(), n), ReduceOp::Max);
        w1->wait();
        w2->wait();
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(f[i], static_cast<float>(reference<float>(ReduceOp::Sum, 3, i))) << i;
          ASSERT_EQ(m[i], static_cast<int32_t>(i % 1000) * 3) << i;
        }
      },
      test_options(), backend);
}

TEST_P(Collectives, ManyOutstandingCompleteInIssueOrder) {
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg) {
        constexpr int kCount = 200;
        EXPECT_EQ(pg.next_sequence_number(), 0u);
        std::vector<int64_t> values(kCount);
        std::vector<std::shared_ptr<Work>> works;
        for (int k = 0; k < kCount; ++k) {
          values[k] = k + rank;
          works.push_back(pg.allreduce(comm_buffer(&values[k], 1), ReduceOp::Sum));
        }
        EXPECT_EQ(pg.next_sequence_number(), static_cast<uint64_t>(kCount));
        works.back()->wait();
        // One worker thread in issue order: when the last is done, all earlier ones are too.
        for (auto& w : works) EXPECT_TRUE(w->is_completed());
        for (int k = 0; k < kCount; ++k) EXPECT_EQ(values[k], 2 * k + 1);
      },
      test_options(), backend);
}

TEST_P(Collectives, KeepaliveIsReleasedWhenTheWorkCompletes) {
  run_threads(
      2,
      [&](int, ProcessGroup& pg) {
        auto storage = std::make_shared<std::vector<float>>(64, 1.0f);
        std::weak_ptr<std::vector<float>> watch = storage;
        CommBuffer b{storage->data(), 64, DType::F32, Device::cpu(), storage};
        storage.reset();  // only the CommBuffer (and soon the group) keeps it alive
        auto w = pg.allreduce(std::move(b), ReduceOp::Sum);
        w->wait();
        EXPECT_TRUE(watch.expired());
      },
      test_options(), backend);
}

TEST_P(Collectives, BadArgumentsAreRejectedAtIssue) {
  run_threads(
      2,
      [&](int, ProcessGroup& pg) {
        std::vector<float> in(4), out(7);
        try {
          pg.allgather(comm_buffer(in.data(), 4), comm_buffer(out.data(), 7));
          ADD_FAILURE() << "allgather with a wrong output size was accepted";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("expected world size 2 x input 4 = 8"), std::string::npos)
              << e.what();
        }
        EXPECT_THROW(pg.broadcast(comm_buffer(in.data(), 4), 2), Error);
        EXPECT_THROW(pg.reduce_scatter(comm_buffer(in.data(), 4), comm_buffer(out.data(), 3)), Error);
        std::vector<double> d(4);
        EXPECT_THROW(pg.allgather(comm_buffer(in.data(), 2), comm_buffer(d.data(), 4)), Error);
        EXPECT_THROW(pg.allreduce(CommBuffer{nullptr, 3, DType::F32, Device::cpu(), nullptr}), Error);
        // Rejected calls take no sequence number, so the ranks stay in step.
        EXPECT_EQ(pg.next_sequence_number(), 0u);
        EXPECT_EQ(pg.backend_name(), backend);
      },
      test_options(), backend);
}

INSTANTIATE_TEST_SUITE_P(Backends, Collectives, ::testing::ValuesIn(kBackends));
