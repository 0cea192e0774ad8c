// test_gpu_collectives_space.cpp - the seeded differential test of the collectives (tests/support/
// collective_space.h) on CUDA memory: NCCL at world 1 (NCCL refuses two ranks on one GPU) and the Gloo
// group's CUDA staging at worlds 2 and 3, over the boundary counts of every dtype, every reduce op, broadcast
// from every root, all-gather and reduce-scatter (every op) out of place and in place. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/distributed/cuda/nccl_reduce_op.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/tensor/tensor.h"
#include "tests/gpu/nccl_world_one.h"
#include "tests/support/collective_space.h"

using namespace ddp;
using namespace ddp::dist;
using namespace ddp::testing;

namespace {

constexpr size_t kGpuMaxBytes = 1 << 20;  // fewer and smaller counts than on the CPU: one shared GPU

// Host bytes of n elements of t, filled with rank r's inputs of `call`, as a CUDA tensor.
Tensor device_input(uint64_t call, int rank, int64_t n, DType t) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = space_input(call, rank, i, t);
  return Tensor::from_vector(v, {n}, t).to(Device::cuda(0));
}
CommBuffer buffer_of(const Tensor& t) {
  return CommBuffer{t.raw_data(), t.numel(), t.dtype(), t.device(), t.storage()};
}
std::vector<double> host_values(const Tensor& t) { return t.to(Device::cpu()).to_double_vector(); }

std::vector<int64_t> gpu_counts(int world, DType t, std::mt19937_64& rng) {
  std::vector<int64_t> out;
  for (int64_t n : boundary_counts(world, dtype_size(t), size_t{1} << 20, kGpuMaxBytes, rng, 1))
    if (n * static_cast<int64_t>(dtype_size(t)) <= static_cast<int64_t>(kGpuMaxBytes)) out.push_back(n);
  return out;
}

void check_every_collective(ProcessGroup& pg) {
  const int world = pg.size(), rank = pg.rank();
  std::mt19937_64 rng(space_seed() + 7 * static_cast<uint64_t>(world));
  uint64_t call = 0;
  for (DType t : kSpaceDtypes) {
    for (int64_t n : gpu_counts(world, t, rng)) {
      const std::string what = std::to_string(n) + " x " + std::string(dtype_name(t)) + " on " +
                               pg.backend_name() + " world " + std::to_string(world) +
                               " (DDP_TEST_SEED=" + std::to_string(space_seed()) + ")";
      for (ReduceOp op : kSpaceOps) {
        Tensor x = device_input(++call, rank, n, t);
        pg.allreduce(buffer_of(x), op)->wait();
        const auto got = host_values(x);
        for (int64_t i = 0; i < n; ++i) {
          const Expected e = space_reference(call, world, i, t, op);
          ASSERT_LE(std::abs(got[i] - e.value), e.tolerance)
              << "all-reduce " << reduce_op_name(op) << " of " << what << ": element " << i;
        }
      }
      const int root = static_cast<int>(++call % world);
      Tensor b = device_input(call, rank, n, t);
      pg.broadcast(buffer_of(b), root)->wait();
      const auto bv = host_values(b);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(bv[i], space_input(call, root, i, t)) << "broadcast from " << root << " of " << what;
      // All-gather and reduce-scatter of chunks of n / world, out of place and in place (the input, resp.
      // the output, is this rank's chunk of the whole buffer: at an offset of rank x chunk elements),
      // reduce-scatter with every op.
      const int64_t per_rank = n / world;
      for (bool in_place : {false, true}) {
        const std::string how = in_place ? " (in place) of " : " of ";
        Tensor gathered, in;
        if (in_place) {
          // The whole output with this rank's inputs in its block and a marker elsewhere.
          std::vector<double> host(static_cast<size_t>(per_rank * world), -7.0);
          ++call;
          for (int64_t i = 0; i < per_rank; ++i) host[rank * per_rank + i] = space_input(call, rank, i, t);
          gathered = Tensor::from_vector(host, {per_rank * world}, t).to(Device::cuda(0));
          in = gathered.slice0(rank * per_rank, (rank + 1) * per_rank);
        } else {
          in = device_input(++call, rank, per_rank, t);
          gathered = Tensor::zeros({per_rank * world}, t, Device::cuda(0));
        }
        pg.allgather(buffer_of(in), buffer_of(gathered))->wait();
        const auto gv = host_values(gathered);
        for (int q = 0; q < world; ++q)
          for (int64_t i = 0; i < per_rank; ++i)
            ASSERT_EQ(gv[q * per_rank + i], space_input(call, q, i, t))
                << "all-gather" << how << what << ": rank " << rank << " block " << q << " element " << i;
        if (!in_place) {  // the input is left as it was
          EXPECT_EQ(host_values(in),
                    std::vector<double>(gv.begin() + rank * per_rank, gv.begin() + (rank + 1) * per_rank));
        }
        for (ReduceOp op : kSpaceOps) {
          Tensor whole = device_input(++call, rank, per_rank * world, t);
          Tensor mine = in_place ? whole.slice0(rank * per_rank, (rank + 1) * per_rank)
                                 : Tensor::zeros({per_rank}, t, Device::cuda(0));
          pg.reduce_scatter(buffer_of(whole), buffer_of(mine), op)->wait();
          const auto mv = host_values(mine);
          for (int64_t i = 0; i < per_rank; ++i) {
            const Expected e = space_reference(call, world, rank * per_rank + i, t, op);
            ASSERT_LE(std::abs(mv[i] - e.value), e.tolerance)
                << "reduce-scatter " << reduce_op_name(op) << how << what << ": rank " << rank << " element "
                << i;
          }
          if (!in_place) {
            const auto wv = host_values(whole);  // the input is left as it was
            for (int64_t i = 0; i < per_rank * world; ++i)
              ASSERT_EQ(wv[i], space_input(call, rank, i, t)) << "reduce-scatter input" << how << what;
          }
        }
      }
    }
  }
}

}  // namespace

TEST(GpuCollectiveSpace, NcclAtWorldOne) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  run_threads(
      1,
      [&](int, ProcessGroup&, Store& store) {
        auto nccl = nccl_world_one(store, "nccl-space");
        check_every_collective(*nccl);
      },
      ProcessGroupOptions{});
}

TEST(GpuCollectiveSpace, GlooStagedCudaBuffersAtWorldsTwoAndThree) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  for (int world : {2, 3}) run_threads(world, [&](int, ProcessGroup& pg) { check_every_collective(pg); });
}

// No GPU needed: at world 1 an average is asked of NCCL as a sum (nccl_reduce_op.h: NCCL's one-rank ncclAvg
// kernel drops a buffer's tail before 2.29.7); at world 2 and up it stays NCCL's average.
TEST(GpuCollectiveSpace, AverageAtWorldOneIsAskedOfNcclAsASum) {
  EXPECT_EQ(nccl_reduce_op(ReduceOp::Avg, 1), ncclSum);
  for (int world : {2, 3, 4}) EXPECT_EQ(nccl_reduce_op(ReduceOp::Avg, world), ncclAvg) << "world " << world;
  for (int world : {1, 2}) {
    EXPECT_EQ(nccl_reduce_op(ReduceOp::Sum, world), ncclSum);
    EXPECT_EQ(nccl_reduce_op(ReduceOp::Max, world), ncclMax);
    EXPECT_EQ(nccl_reduce_op(ReduceOp::Min, world), ncclMin);
  }
}
