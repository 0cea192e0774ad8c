// train_setup.h - everything `train` builds before its first step: the device and dtype, the data set, the
// model wrapped in DDP (and SyncBatchNorm), the optimizer (sharded with --zero), the training and validation
// loaders of this rank, the number of steps (per rank with uneven data), the learning-rate schedule, and Join.
#pragma once
#include <memory>
#include <string>

#include "models/train.h"
#include "runtime/data/data_loader.h"
#include "runtime/ddp/deterministic_reduction.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/join.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optimizer.h"

namespace ddp::models {

struct TrainData {
  std::shared_ptr<const data::Dataset> train, val;
  bool tokens = false;  // language model: x, y are (B, T) int64
  int64_t classes = 10;
  std::string name;
};

// The members are declared in the order they are built (and destroyed in reverse: Join before DDP).
struct TrainSetup {
  int rank = 0, world = 1;
  DType dtype = DType::F32;  // of the parameters (float32 also for --dtype bfloat16: bf16 only in compute)
  Device device = Device::cpu();
  TrainData data;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<DistributedDataParallel> ddp;  // --zero 0/1 (null for 2/3: sdp holds its own)
  std::unique_ptr<ShardedDataParallel> sdp;       // --zero 2/3
  std::unique_ptr<optim::Optimizer> optimizer;
  optim::ZeroRedundancyOptimizer* zero = nullptr;  // `optimizer` when --zero 1, else null
  ShardedOptimizer* sharded = nullptr;             // `optimizer` when --zero 2/3, else null
  std::unique_ptr<data::DataLoader> loader, val_loader;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;   // optimizer steps of the run: the most of any rank
  int64_t my_steps = 0;      // this rank's (fewer with --uneven-steps, or fewer batches)
  int64_t common_steps = 0;  // run by every rank: side collectives (log, eval, checkpoints) happen only there
  optim::WarmupCosine schedule;
  std::unique_ptr<Join> join;  // with --join when the ranks' step counts differ (never --deterministic)
  // --deterministic: the exact micro-batch mean, and this rank's micro-batches per step.
  std::unique_ptr<DeterministicReduction> deterministic;
  int64_t micro_batches = 0;

  // The DDP underneath: the plain one, or the one ShardedDataParallel drives (reducer statistics, Join).
  DistributedDataParallel& dp() { return sdp ? sdp->ddp() : *ddp; }
  // Whole parameters for evaluation, checkpoints and sampling: with --zero 2/3 a gathered scope
  // (collective: every rank at the same point), else nothing.
  std::unique_ptr<ShardedDataParallel::GatheredScope> whole_parameters() {
    return sdp ? std::make_unique<ShardedDataParallel::GatheredScope>(*sdp) : nullptr;
  }
};

// The data set of --data for --model (auto: moby-dick for gpt, fashion-mnist for mlp/cnn, synthetic for branchy).
TrainData load_data(const TrainOptions& o);
// The optimizer of --optimizer (sgd | adamw) with the run's settings over `params`: the plain one, the inner
// one of --zero 1/2/3, and the whole-model one a --zero 2/3 resume loads a checkpoint into first.
std::unique_ptr<optim::Optimizer> make_train_optimizer(const TrainOptions& o,
                                                       std::vector<nn::NamedTensor> params);

// This process's local rank for its GPU: LOCAL_RANK (as every launcher sets it), else `rank`.
int train_local_rank(int rank);

// Checks the options and builds everything; collective (DDP's model check and broadcast, path checks).
// `gather_group`: see train() (train.h).
TrainSetup set_up_training(const TrainOptions& o, std::shared_ptr<dist::ProcessGroup> pg,
                           std::shared_ptr<dist::ProcessGroup> gather_group = nullptr);

}  // namespace ddp::models
