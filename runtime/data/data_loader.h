// data_loader.h - the DataLoader: batches of one rank's share of a Dataset, epoch by epoch,
// prepared ahead by a background thread.
//
//   DataLoader loader(dataset, {.batch_size = 64, .num_replicas = world, .rank = rank, .seed = 42,
//                               .device = Device::cuda(local_rank)});
//   for (int64_t epoch = start; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);              // the ONLY way to begin an epoch: the order depends on it
//     while (auto batch = loader.next()) { ... batch->x, batch->y ... }
//   }
//
// Order: a DistributedSampler (distributed_sampler.h) gives this rank's indices for the epoch (shuffled with
// seed + epoch, padded or cut so every rank has the same count); consecutive runs of batch_size of them are
// the batches, in order. Every rank therefore gets the same number of batches per epoch.
//
// Prefetching: with prefetch_depth > 0 a thread assembles the next batches (at most prefetch_depth waiting)
// while the caller works. For a CUDA device a batch is gathered into pinned host memory and copied to the GPU
// on a separate stream (batch_transfer.h). start_epoch / resume / the destructor stop the thread after at
// most the batch it is assembling; a consumer that stops early never hangs. An exception inside the thread
// (a bad index, a failed copy) is re-thrown by the next next(). The loader is used from one thread.
//
// Checkpoint / resume: position() is {epoch, batches consumed in it, order key}. resume(position) on a loader
// built with the same dataset size and options yields exactly the batches an uninterrupted run would have
// returned after that point (the order key refuses a position saved under another batch size, world size,
// seed, shuffle or drop setting). The position is the same on every rank, so rank 0 may save it for all.
//
// Evaluation: each_sample_once leaves the sampler's padding duplicates out, so over all ranks every sample is
// seen exactly once. Padding only ever sits at the end of a rank's list (at most one sample per rank), so
// only a rank's last batch can be shorter; a batch left empty is skipped, so in this mode ranks can differ by
// one batch: sum metrics over the loop and all-reduce the totals after it. Batch::num_real counts real rows
// in both modes (in training mode the padding rows, if any, are the last rows of the batch).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/data/batch_memory.h"
#include "runtime/data/dataset.h"
#include "runtime/data/distributed_sampler.h"

namespace ddp::data {

struct DataLoaderOptions {
  int64_t batch_size = 32;
  // The DistributedSampler's settings (same meaning; num_replicas = world size).
  int64_t num_replicas = 1;
  int64_t rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;       // the same on every rank
  bool drop_last = false;  // sampler: cut the dataset tail instead of padding
  // Drop each epoch's last batch when it is shorter than batch_size.
  bool drop_incomplete_batch = false;
  // Evaluation: leave padding duplicates out (see above).
  bool each_sample_once = false;
  // Batches the background thread prepares ahead; 0 assembles each batch inside next() (no thread).
  int64_t prefetch_depth = 2;
  // Where batches are delivered. CUDA: pinned staging and an asynchronous copy.
  Device device = Device::cpu();
  // The deterministic mode's plan (docs/determinism.md), 0: off. The epoch's order is the one rank
  // 0 of a world of 1 would see (the sampler with num_replicas 1: no padding, independent of the world
  // size), cut into micro-batches of batch_size; each run of micro_batches_per_step of them is one step, and
  // this rank takes micro-batch j of each step when j % num_replicas == rank (in order of j). An incomplete
  // last step of an epoch is dropped. So micro-batch j of step t holds the same samples at every world size.
  int64_t micro_batches_per_step = 0;
};

// The deterministic plan: how many of a step's `micro_batches` rank `rank` of `world` runs (0 when
// world > micro_batches and rank >= micro_batches).
int64_t micro_batches_of_rank(int64_t micro_batches, int64_t world, int64_t rank);

struct Batch {
  Tensor x;  // (rows, ...) on the loader's device
  Tensor y;  // (rows, ...)
  int64_t epoch = 0;
  int64_t index = 0;     // 0-based batch number within the epoch
  int64_t num_real = 0;  // rows that are real samples, not padding duplicates (== rows with each_sample_once)
  std::vector<int64_t> indices;  // the dataset index of each row
  int64_t rows() const { return static_cast<int64_t>(indices.size()); }
};

// Where a loader stands, for checkpoints.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batches_consumed = 0;  // batches next() returned in this epoch
  uint64_t order_key = 0;        // DataLoader::order_key() of the saving loader; 0 = do not check
  // Where the position was read from, named in resume()'s errors: "metadata field 'batches_in_epoch' of
  // checkpoint 'run/ckpt-step40.safetensors'". Empty: the message names no source.
  std::string origin;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins epoch `epoch` (>= 0) from its first batch, discarding whatever remained of the previous one.
  void start_epoch(int64_t epoch);
  // Begins epoch at.epoch after its first at.batches_consumed batches.
  void resume(const LoaderPosition& at);
  // The next batch of the current epoch, or nullopt when the epoch is over (and on every call after).
  std::optional<Batch> next();

  LoaderPosition position() const;
  int64_t epoch() const { return epoch_; }  // -1 before the first start_epoch
  // Batches this rank gets per epoch (the same for every epoch).
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // A hash of everything that decides the batch order except the rank and the epoch.
  uint64_t order_key() const;
  // Total time next() spent waiting for the prefetch thread, in nanoseconds (data-loading stalls).
  int64_t wait_ns() const { return wait_ns_; }
  const DistributedSampler& sampler() const { return sampler_; }
  const DataLoaderOptions& options() const { return opt_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  struct PlannedBatch {
    std::vector<int64_t> indices;
    int64_t num_real = 0;
  };
  struct Ready {  // a batch, or the exception that replaced it
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  std::vector<PlannedBatch> plan_epoch(int64_t epoch) const;
  std::vector<PlannedBatch> plan_micro_batches(int64_t epoch) const;  // micro_batches_per_step > 0
  void begin(int64_t epoch, int64_t first_batch);
  Batch make_batch(int64_t b);  // from plan_[b]; on the prefetch thread or inside next()
  void produce(int64_t first_batch);
  void stop_worker();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions opt_;
  DistributedSampler sampler_;
  int64_t batches_per_epoch_ = 0;
  std::unique_ptr<BatchMemory> memory_;  // used by whichever thread assembles batches (one at a time)

  // consumer state
  int64_t epoch_ = -1;
  int64_t consumed_ = 0;
  std::vector<PlannedBatch> plan_;  // read-only while the worker runs
  std::exception_ptr failed_;
  int64_t wait_ns_ = 0;

  // shared with the prefetch thread
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Ready> ready_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace ddp::data
