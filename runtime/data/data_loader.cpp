// data_loader.cpp - epoch planning (sampler indices cut into batches), the prefetch
// thread and its queue, and resume.
#include "runtime/data/data_loader.h"

#include <chrono>

#include "runtime/core/error.h"
#include "runtime/data/batch_transfer.h"

namespace ddp::data {
namespace {

DistributedSampler::Options sampler_options(const DataLoaderOptions& o) {
  return {.num_replicas = o.num_replicas,
          .rank = o.rank,
          .shuffle = o.shuffle,
          .seed = o.seed,
          .drop_last = o.drop_last};
}

// FNV-1a over 64-bit words.
uint64_t mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xFF;
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)),
      opt_(options),
      sampler_(dataset_ ? dataset_->size() : 0, sampler_options(options)) {
  DDP_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  DDP_CHECK(opt_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", opt_.batch_size);
  DDP_CHECK(opt_.prefetch_depth >= 0,
            "DataLoader: prefetch_depth must be >= 0 (0 = no prefetch thread), got ", opt_.prefetch_depth);
  if (opt_.device.is_cuda()) {
    DDP_CHECK(
        cuda_compiled(), "DataLoader: device ", opt_.device.str(),
        " needs CUDA, but ddp.cpp was built without it; use the cpu device or rebuild with -DDDP_CUDA=ON");
    DDP_CHECK(opt_.device.index >= 0 && opt_.device.index < cuda_device_count(), "DataLoader: device ",
              opt_.device.str(), " does not exist (", cuda_device_count(), " usable GPUs",
              cuda_device_count() == 0 ? ": " + cuda_unavailable_reason() : std::string(), ")");
  }
  memory_ = std::make_unique<BatchMemory>(/*pinned=*/opt_.device.is_cuda());
  batches_per_epoch_ =
      static_cast<int64_t>(plan_epoch(0).size());  // padding sits at the tail: same every epoch
}

DataLoader::~DataLoader() { stop_worker(); }

uint64_t DataLoader::order_key() const {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint64_t v :
       {static_cast<uint64_t>(dataset_->size()), static_cast<uint64_t>(opt_.batch_size),
        // the deterministic plan's order does not depend on the world size
        static_cast<uint64_t>(opt_.micro_batches_per_step > 0 ? 0 : opt_.num_replicas), opt_.seed,
        uint64_t{opt_.shuffle}, uint64_t{opt_.drop_last}, uint64_t{opt_.drop_incomplete_batch},
        uint64_t{opt_.each_sample_once}})
    h = mix(h, v);
  if (opt_.micro_batches_per_step > 0) h = mix(h, static_cast<uint64_t>(opt_.micro_batches_per_step));
  return h == 0 ? 1 : h;  // 0 means "unchecked" in a LoaderPosition
}

int64_t micro_batches_of_rank(int64_t micro_batches, int64_t world, int64_t rank) {
  DDP_CHECK(world >= 1 && rank >= 0 && rank < world, "micro_batches_of_rank: rank ", rank, " of world ", world);
  return micro_batches > rank ? (micro_batches - rank + world - 1) / world : 0;
}

std::vector<DataLoader::PlannedBatch> DataLoader::plan_epoch(int64_t epoch) const {
  if (opt_.micro_batches_per_step > 0) return plan_micro_batches(epoch);
  const SamplerEpoch share = sampler_.indices_for_epoch(epoch);
  const auto n = static_cast<int64_t>(share.indices.size()), bs = opt_.batch_size;
  std::vector<PlannedBatch> plan;
  for (int64_t begin = 0; begin < n; begin += bs) {
    const int64_t end = std::min(n, begin + bs);
    if (end - begin < bs && opt_.drop_incomplete_batch) break;
    PlannedBatch p;
    for (int64_t k = begin; k < end; ++k) {
      const bool padding = share.is_padding[static_cast<size_t>(k)] != 0;
      if (padding && opt_.each_sample_once) continue;
      p.indices.push_back(share.indices[static_cast<size_t>(k)]);
      p.num_real += padding ? 0 : 1;
    }
    if (!p.indices.empty()) plan.push_back(std::move(p));
  }
  return plan;
}

std::vector<DataLoader::PlannedBatch> DataLoader::plan_micro_batches(int64_t epoch) const {
  const DistributedSampler whole(dataset_->size(), {.num_replicas = 1,
                                                    .rank = 0,
                                                    .shuffle = opt_.shuffle,
                                                    .seed = opt_.seed,
                                                    .drop_last = opt_.drop_last});
  const std::vector<int64_t> order = whole.indices_for_epoch(epoch).indices;
  const int64_t m = opt_.micro_batches_per_step, bs = opt_.batch_size;
  const int64_t steps = static_cast<int64_t>(order.size()) / (m * bs);
  std::vector<PlannedBatch> plan;
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t j = opt_.rank; j < m; j += opt_.num_replicas) {
      PlannedBatch p;
      const auto first = order.begin() + (t * m + j) * bs;
      p.indices.assign(first, first + bs);
      p.num_real = bs;
      plan.push_back(std::move(p));
    }
  return plan;
}

void DataLoader::start_epoch(int64_t epoch) { begin(epoch, 0); }

void DataLoader::resume(const LoaderPosition& at) {
  DDP_CHECK(
      at.order_key == 0 || at.order_key == order_key(),
      "DataLoader::resume: the position was saved by a loader ",
      "with a different batch order (dataset size, batch_size, world size, seed, shuffle or drop settings ",
      "differ), so the remaining batches would not match; resume with the options of the saved run, or "
      "start ",
      "a fresh epoch with start_epoch()");
  DDP_CHECK(
      at.batches_consumed >= 0 && at.batches_consumed <= batches_per_epoch_, "DataLoader::resume: position ",
      at.batches_consumed, at.origin.empty() ? std::string() : " (" + at.origin + ")",
      " is outside the epoch's [0, ", batches_per_epoch_, "] batches of this loader",
      at.origin.empty() ? std::string()
                        : ": the checkpoint was written with other data or batch settings, or is damaged; "
                          "resume from another checkpoint or start without --resume");
  begin(at.epoch, at.batches_consumed);
}

void DataLoader::begin(int64_t epoch, int64_t first_batch) {
  DDP_CHECK(epoch >= 0, "DataLoader::start_epoch: epoch must be >= 0, got ", epoch);
  stop_worker();
  plan_ = plan_epoch(epoch);
  epoch_ = epoch;
  consumed_ = first_batch;
  failed_ = nullptr;
  if (opt_.prefetch_depth > 0 && first_batch < static_cast<int64_t>(plan_.size()))
    worker_ = std::thread(&DataLoader::produce, this, first_batch);
}

LoaderPosition DataLoader::position() const {
  DDP_CHECK(epoch_ >= 0, "DataLoader::position() before start_epoch(): there is no position yet");
  return {epoch_, consumed_, order_key()};
}

Batch DataLoader::make_batch(int64_t b) {
  const PlannedBatch& p = plan_[static_cast<size_t>(b)];
  DatasetBatch host = dataset_->get_batch(p.indices, *memory_);
  DDP_CHECK(host.x.defined() && host.y.defined() &&
                host.x.size(0) == static_cast<int64_t>(p.indices.size()) &&
                host.y.size(0) == static_cast<int64_t>(p.indices.size()),
            "DataLoader: the dataset's get_batch returned x ",
            host.x.defined() ? shape_str(host.x.shape()) : "undefined", " and y ",
            host.y.defined() ? shape_str(host.y.shape()) : "undefined", " for ", p.indices.size(),
            " indices; both need the batch as first dimension");
  Batch out;
  out.x = transfer_to_device(host.x, opt_.device);
  out.y = transfer_to_device(host.y, opt_.device);
  out.epoch = epoch_;
  out.index = b;
  out.num_real = p.num_real;
  out.indices = p.indices;
  return out;
}

void DataLoader::produce(int64_t first_batch) {
  const auto depth = static_cast<size_t>(opt_.prefetch_depth);
  for (int64_t b = first_batch; b < static_cast<int64_t>(plan_.size()); ++b) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || ready_.size() < depth; });
      if (stop_) return;
    }
    Ready item;
    try {
      item.batch = make_batch(b);
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool failed = item.error != nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      ready_.push_back(std::move(item));
    }
    cv_.notify_all();
    if (failed) return;
  }
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  ready_.clear();
  stop_ = false;
}

std::optional<Batch> DataLoader::next() {
  DDP_CHECK(epoch_ >= 0,
            "DataLoader::next() called before start_epoch(): call loader.start_epoch(epoch) at the ",
            "start of every epoch (or resume(position) after a checkpoint)");
  if (failed_) std::rethrow_exception(failed_);
  if (consumed_ >= static_cast<int64_t>(plan_.size())) return std::nullopt;
  Batch batch;
  if (opt_.prefetch_depth == 0) {
    batch = make_batch(consumed_);
  } else {
    Ready item;
    const auto t0 = std::chrono::steady_clock::now();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !ready_.empty(); });
      item = std::move(ready_.front());
      ready_.pop_front();
    }
    cv_.notify_all();
    wait_ns_ +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    if (item.error) {
      failed_ = item.error;
      std::rethrow_exception(failed_);
    }
    batch = std::move(*item.batch);
  }
  ++consumed_;
  hand_over_to_current_stream(batch.x);
  hand_over_to_current_stream(batch.y);
  return batch;
}

}  // namespace ddp::data
