// test_data_loader.cpp - the DataLoader over small datasets whose rows carry their own index: coverage
// per epoch across simulated ranks, shuffling per epoch and seed, prefetching equal to synchronous
// loading, resume at (epoch, position), early destruction, evaluation mode, error propagation, and the
// GPU path (skipped without a GPU).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/tensor_dataset.h"

namespace ddp::data {
namespace {

// Row i: x = {i, -i} (float32), y = i (int64), so a batch shows which samples it holds.
std::shared_ptr<TensorDataset> index_dataset(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(-i));
    y.push_back(i);
  }
  return std::make_shared<TensorDataset>(Tensor::from_data(x, {n, 2}), Tensor::from_data(y, {n}));
}

// A dataset that fails on one index (to check that the prefetch thread's errors reach the caller).
class FailingDataset : public Dataset {
 public:
  FailingDataset(int64_t n, int64_t bad) : inner_(index_dataset(n)), bad_(bad) {}
  int64_t size() const override { return inner_->size(); }
  DatasetBatch get_batch(std::span<const int64_t> indices, BatchMemory& memory) const override {
    for (int64_t i : indices) DDP_CHECK(i != bad_, "FailingDataset: sample ", i, " is unreadable");
    return inner_->get_batch(indices, memory);
  }

 private:
  std::shared_ptr<TensorDataset> inner_;
  int64_t bad_;
};

struct Seen {
  std::vector<int64_t> indices;
  int64_t num_real;
  bool operator==(const Seen&) const = default;
};

// All batches of one epoch, checking each batch's rows against its indices.
std::vector<Seen> run_epoch(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<Seen> out;
  while (auto b = loader.next()) {
    EXPECT_EQ(b->epoch, epoch);
    EXPECT_EQ(b->index, static_cast<int64_t>(out.size()));
    EXPECT_EQ(b->x.size(0), b->rows());
    EXPECT_EQ(b->y.size(0), b->rows());
    const auto x = b->x.to_double_vector();
    const auto y = b->y.to_double_vector();
    for (int64_t r = 0; r < b->rows(); ++r) {
      EXPECT_EQ(x[static_cast<size_t>(2 * r)], b->indices[static_cast<size_t>(r)]);
      EXPECT_EQ(x[static_cast<size_t>(2 * r + 1)], -b->indices[static_cast<size_t>(r)]);
      EXPECT_EQ(y[static_cast<size_t>(r)], b->indices[static_cast<size_t>(r)]);
    }
    out.push_back({b->indices, b->num_real});
  }
  EXPECT_FALSE(loader.next().has_value()) << "next() after the end must stay empty";
  return out;
}

DataLoaderOptions opts(int64_t batch, int64_t world, int64_t rank, uint64_t seed = 42, int64_t depth = 2) {
  return {.batch_size = batch,
          .num_replicas = world,
          .rank = rank,
          .shuffle = true,
          .seed = seed,
          .prefetch_depth = depth};
}

TEST(DataLoader, TwoRanksCoverTheDatasetOncePerEpoch) {
  const int64_t n = 23;
  auto ds = index_dataset(n);
  DataLoader r0(ds, opts(4, 2, 0)), r1(ds, opts(4, 2, 1));
  EXPECT_EQ(r0.batches_per_epoch(), 3);  // 12 samples per rank (one padding duplicate in total)
  EXPECT_EQ(r1.batches_per_epoch(), 3);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::map<int64_t, int> real;
    int64_t rows = 0;
    for (DataLoader* l : {&r0, &r1}) {
      auto batches = run_epoch(*l, epoch);
      EXPECT_EQ(static_cast<int64_t>(batches.size()), l->batches_per_epoch());
      for (auto& b : batches) {
        rows += static_cast<int64_t>(b.indices.size());
        // padding rows are the last rows of a batch: count the leading num_real as the real samples
        for (int64_t r = 0; r < b.num_real; ++r) ++real[b.indices[static_cast<size_t>(r)]];
      }
    }
    EXPECT_EQ(rows, 24);
    ASSERT_EQ(static_cast<int64_t>(real.size()), n) << "epoch " << epoch;
    for (auto [idx, count] : real) EXPECT_EQ(count, 1) << "sample " << idx << " in epoch " << epoch;
  }
}

TEST(DataLoader, ShuffleChangesPerEpochAndIsDeterministicPerSeed) {
  auto ds = index_dataset(40);
  DataLoader a(ds, opts(5, 2, 0, 7)), b(ds, opts(5, 2, 0, 7)), c(ds, opts(5, 2, 0, 8));
  const auto a0 = run_epoch(a, 0), a1 = run_epoch(a, 1);
  EXPECT_NE(a0, a1) << "epochs 0 and 1 came in the same order";
  EXPECT_EQ(run_epoch(b, 1), a1);  // same seed: same order, even starting at epoch 1
  EXPECT_EQ(run_epoch(b, 0), a0);
  EXPECT_NE(run_epoch(c, 0), a0) << "seeds 7 and 8 gave the same order";
  EXPECT_EQ(run_epoch(a, 0), a0) << "replaying epoch 0 changed its order";

  DataLoaderOptions plain = opts(5, 2, 1);
  plain.shuffle = false;
  DataLoader ordered(ds, plain);
  const auto e = run_epoch(ordered, 3);
  EXPECT_EQ(e[0].indices, (std::vector<int64_t>{1, 3, 5, 7, 9}));  // interleaved: rank 1 takes 1, 3, 5, ...
  EXPECT_EQ(run_epoch(ordered, 4), e);
}

TEST(DataLoader, PrefetchDepthDoesNotChangeTheBatches) {
  auto ds = index_dataset(50);
  DataLoader sync(ds, opts(6, 3, 2, 1, 0));
  const auto expected = run_epoch(sync, 2);
  for (int64_t depth : {1, 2, 5}) {
    DataLoader pre(ds, opts(6, 3, 2, 1, depth));
    EXPECT_EQ(run_epoch(pre, 2), expected) << "prefetch_depth " << depth;
  }
}

TEST(DataLoader, ResumeYieldsTheSameRemainingBatches) {
  auto ds = index_dataset(37);
  for (int64_t depth : {0, 2}) {
    SCOPED_TRACE("prefetch_depth " + std::to_string(depth));
    DataLoader full(ds, opts(4, 2, 1, 9, depth));
    const auto e1 = run_epoch(full, 1), e2 = run_epoch(full, 2);
    ASSERT_EQ(static_cast<int64_t>(e1.size()), full.batches_per_epoch());

    for (int64_t stop_after : {int64_t{0}, int64_t{1}, int64_t{3}, full.batches_per_epoch()}) {
      LoaderPosition saved;
      {  // the interrupted run: consume stop_after batches of epoch 1, save, go away
        DataLoader first(ds, opts(4, 2, 1, 9, depth));
        first.start_epoch(1);
        for (int64_t i = 0; i < stop_after; ++i) ASSERT_TRUE(first.next().has_value());
        saved = first.position();
      }
      EXPECT_EQ(saved.epoch, 1);
      EXPECT_EQ(saved.batches_consumed, stop_after);
      DataLoader second(ds, opts(4, 2, 1, 9, depth));
      second.resume(saved);
      std::vector<Seen> rest;
      while (auto b = second.next()) {
        EXPECT_EQ(b->index, stop_after + static_cast<int64_t>(rest.size()));
        rest.push_back({b->indices, b->num_real});
      }
      EXPECT_EQ(rest, std::vector<Seen>(e1.begin() + stop_after, e1.end())) << "resumed after " << stop_after;
      EXPECT_EQ(run_epoch(second, 2), e2);  // and the next epoch continues as if never interrupted
    }
  }
}

TEST(DataLoader, ResumeRefusesAPositionFromAnotherOrder) {
  auto ds = index_dataset(37);
  DataLoader saver(ds, opts(4, 2, 0, 9));
  saver.start_epoch(0);
  saver.next();
  const LoaderPosition pos = saver.position();
  DataLoader other_rank(ds, opts(4, 2, 1, 9));
  EXPECT_NO_THROW(other_rank.resume(pos));  // the rank is not part of the order: rank 0 may save for all
  for (DataLoaderOptions o : {opts(5, 2, 0, 9), opts(4, 4, 0, 9), opts(4, 2, 0, 10)}) {
    DataLoader l(ds, o);
    try {
      l.resume(pos);
      FAIL() << "a position from another batch order was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("different batch order"), std::string::npos) << e.what();
    }
  }
  DataLoader same(ds, opts(4, 2, 0, 9));
  EXPECT_THROW(same.resume({0, same.batches_per_epoch() + 1, 0}), Error);
  EXPECT_THROW(same.resume({-1, 0, 0}), Error);
}

// Runs `body` on a thread and fails (instead of hanging the suite) when it does not finish in 60 s.
void expect_finishes(const std::function<void()>& body, const char* what) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  std::thread t([body, done] {
    body();
    done->set_value();
  });
  if (finished.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    t.detach();
    FAIL() << what << " hung";
  }
  t.join();
}

TEST(DataLoader, EarlyStopAndRestartDoNotHang) {
  auto ds = index_dataset(1000);
  expect_finishes(
      [&] {
        DataLoader l(ds, opts(2, 1, 0, 1, 2));
        l.start_epoch(0);
        l.next();  // the prefetch thread now fills its queue and waits for room
      },
      "destroying a loader with a full queue");
  expect_finishes(
      [&] {
        DataLoader l(ds, opts(2, 1, 0, 1, 3));
        l.start_epoch(0);  // never consumed
      },
      "destroying a loader that was never read");
  expect_finishes(
      [&] {
        DataLoader l(ds, opts(2, 1, 0, 1, 2));
        for (int64_t e = 0; e < 20; ++e) {
          l.start_epoch(e);
          auto b = l.next();
          ASSERT_TRUE(b.has_value());
          EXPECT_EQ(b->epoch, e);  // nothing of the abandoned epoch leaks into the new one
        }
      },
      "restarting epochs mid-way");
  expect_finishes([&] { DataLoader l(ds, opts(2, 1, 0, 1, 2)); }, "destroying a loader before any epoch");
}

TEST(DataLoader, EachSampleOnceLeavesPaddingOut) {
  const int64_t n = 23, world = 4;  // total 24: one padding duplicate, on rank 3
  auto ds = index_dataset(n);
  std::map<int64_t, int> seen_eval;
  int64_t real_train = 0, rows_train = 0;
  for (int64_t rank = 0; rank < world; ++rank) {
    DataLoaderOptions eval = opts(4, world, rank);
    eval.each_sample_once = true;
    DataLoader le(ds, eval);
    for (auto& b : run_epoch(le, 5)) {
      EXPECT_EQ(b.num_real, static_cast<int64_t>(b.indices.size()));
      for (int64_t i : b.indices) ++seen_eval[i];
    }
    DataLoader lt(ds, opts(4, world, rank));
    for (auto& b : run_epoch(lt, 5)) {
      real_train += b.num_real;
      rows_train += static_cast<int64_t>(b.indices.size());
    }
  }
  ASSERT_EQ(static_cast<int64_t>(seen_eval.size()), n);
  for (auto [idx, count] : seen_eval) EXPECT_EQ(count, 1) << "sample " << idx;
  EXPECT_EQ(real_train, n);  // training mode keeps the duplicate but reports it
  EXPECT_EQ(rows_train, 24);

  // A rank whose whole share is padding gets no batches in evaluation mode.
  DataLoaderOptions tiny = opts(2, 3, 2);
  tiny.each_sample_once = true;
  DataLoader only_padding(index_dataset(1), tiny);
  EXPECT_EQ(only_padding.batches_per_epoch(), 0);
  only_padding.start_epoch(0);
  EXPECT_FALSE(only_padding.next().has_value());
}

TEST(DataLoader, DropIncompleteBatch) {
  auto ds = index_dataset(10);
  DataLoaderOptions o = opts(4, 1, 0);
  DataLoader keep(ds, o);
  EXPECT_EQ(keep.batches_per_epoch(), 3);
  o.drop_incomplete_batch = true;
  DataLoader drop(ds, o);
  EXPECT_EQ(drop.batches_per_epoch(), 2);
  for (auto& b : run_epoch(drop, 0)) EXPECT_EQ(b.indices.size(), 4u);
}

TEST(DataLoader, ErrorsFromThePrefetchThreadReachTheCaller) {
  auto ds = std::make_shared<FailingDataset>(20, 13);
  for (int64_t depth : {0, 2}) {
    DataLoaderOptions o = opts(4, 1, 0, 0, depth);
    o.shuffle = false;  // sample 13 is in batch 3
    DataLoader l(ds, o);
    l.start_epoch(0);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(l.next().has_value());
    try {
      l.next();
      FAIL() << "the failing batch was not reported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sample 13 is unreadable"), std::string::npos) << e.what();
    }
    EXPECT_THROW(l.next(), Error);  // the epoch stays broken ...
    l.start_epoch(1);               // ... until a new one starts
    EXPECT_TRUE(l.next().has_value());
  }
}

TEST(DataLoader, MisuseIsReported) {
  auto ds = index_dataset(10);
  DataLoader l(ds, opts(4, 1, 0));
  try {
    l.next();
    FAIL() << "next() before start_epoch() was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("start_epoch"), std::string::npos) << e.what();
  }
  EXPECT_THROW(l.position(), Error);
  EXPECT_THROW(l.start_epoch(-1), Error);
  EXPECT_THROW(DataLoader(ds, opts(0, 1, 0)), Error);
  EXPECT_THROW(DataLoader(ds, opts(4, 2, 2)), Error);  // rank outside the world
  EXPECT_THROW(DataLoader(ds, opts(4, 1, 0, 0, -1)), Error);
  EXPECT_THROW(DataLoader(nullptr, opts(4, 1, 0)), Error);
  if (cuda_device_count() == 0) {
    DataLoaderOptions gpu = opts(4, 1, 0);
    gpu.device = Device::cuda(0);
    EXPECT_THROW(DataLoader(ds, gpu), Error);
  }
}

TEST(DataLoader, TokenWindowsThroughTheLoader) {
  auto ds = synthetic_token_dataset(1001, 50, 10, 4);  // 100 windows
  DataLoader l(ds, opts(8, 2, 0));
  l.start_epoch(0);
  int64_t rows = 0;
  while (auto b = l.next()) {
    ASSERT_EQ(b->x.shape(), (Shape{b->rows(), 10}));
    ASSERT_EQ(b->y.dtype(), DType::I64);
    const auto x = b->x.to_double_vector(), y = b->y.to_double_vector();
    for (int64_t r = 0; r < b->rows(); ++r)
      for (int64_t j = 0; j + 1 < 10; ++j)
        EXPECT_EQ(y[r * 10 + j], x[r * 10 + j + 1]);  // y is x shifted by one
    rows += b->rows();
  }
  EXPECT_EQ(rows, 50);
}

TEST(BatchMemory, PinnedBlocksAreReusedOnlyWhenFree) {
  BatchMemory mem(/*pinned=*/true, /*max_cached_blocks=*/2);
  Tensor a = mem.empty({4, 8}, DType::F32);
  void* first = a.raw_data();
  Tensor b = mem.empty({4, 8}, DType::F32);
  EXPECT_NE(b.raw_data(), first) << "a block still in use was handed out again";
  a = Tensor();
  Tensor c = mem.empty({2, 8}, DType::F32);  // smaller request: fits in the freed block
  EXPECT_EQ(c.raw_data(), first);
  EXPECT_EQ(c.shape(), (Shape{2, 8}));
  Tensor d = mem.empty({100}, DType::I64);  // nothing free and big enough: new block, cache full
  EXPECT_EQ(mem.cached_blocks(), 2u);
  EXPECT_EQ(d.numel(), 100);
}

TEST(DataLoader, GpuBatchesMatchCpuBatches) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();
  auto ds = synthetic_classification(100, {1, 6, 6}, 3, 2);
  DataLoaderOptions cpu = opts(16, 2, 1);
  DataLoaderOptions gpu = cpu;
  gpu.device = Device::cuda(0);
  DataLoader lc(ds, cpu), lg(ds, gpu);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    lc.start_epoch(epoch);
    lg.start_epoch(epoch);
    while (auto bc = lc.next()) {
      auto bg = lg.next();
      ASSERT_TRUE(bg.has_value());
      EXPECT_TRUE(bg->x.device() == Device::cuda(0));
      EXPECT_EQ(bg->indices, bc->indices);
      EXPECT_EQ(bg->x.to_double_vector(), bc->x.to_double_vector());
      EXPECT_EQ(bg->y.to_double_vector(), bc->y.to_double_vector());
    }
    EXPECT_FALSE(lg.next().has_value());
  }
}

}  // namespace
}  // namespace ddp::data
