// ddp_test_util.h - shared pieces of the DDP tests: deterministic float64 data, training one rank's DDP
// replica or the single-process reference, and parameter snapshots for comparison.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/process_group.h"
#include "runtime/distributed/store.h"
#include "runtime/nn/module.h"

namespace ddp::testing {

// A full batch: inputs (float64 features or int64 tokens) and int64 targets; rows split across ranks.
struct Batch {
  Tensor x, y;
  Batch rows(int64_t begin, int64_t end) const { return {x.slice0(begin, end), y.slice0(begin, end)}; }
};

using ModelFactory = std::function<std::shared_ptr<nn::Module>()>;
using BatchFn = std::function<Batch(int step, int64_t rows)>;

struct RunConfig {
  int world = 2;
  int64_t per_rank = 3;  // rows per rank per micro-step
  int steps = 5;
  int accumulation = 1;     // micro-steps per optimizer step (no_sync for all but the last)
  bool set_to_none = true;  // zero_grad mode of the DDP ranks (false: zero in place, keeps bucket views)
  DDPOptions ddp;
  std::string backend = "gloo";  // process group of the thread ranks: gloo, shm or hier (run_threads)
};

// Snapshot: the values of every parameter (and buffer), flattened, in registration order.
std::vector<std::vector<double>> snapshot_params(const nn::Module& m);
std::vector<std::vector<double>> snapshot_buffers(const nn::Module& m);

// Trains with DDP on run.world threads, each step through train's own models::train_step; returns each
// rank's final parameter snapshot and checks (through EXPECT) that all ranks are bitwise identical after every
// step.
std::vector<std::vector<std::vector<double>>> train_ddp(const ModelFactory& make, const BatchFn& data,
                                                        const RunConfig& run);
// One process: for each step, the N*per_rank*accumulation rows; per_slice=true accumulates the gradients
// of each rank-sized slice with loss/N (the reference for models whose forward depends on the slice, like
// BatchNorm statistics or data-dependent routing); false runs the whole batch at once.
std::vector<std::vector<double>> train_reference(const ModelFactory& make, const BatchFn& data,
                                                 const RunConfig& run, bool per_slice);

// max |a-b| / max(|b|, 1e-3) over all elements.
double max_relative_difference(const std::vector<std::vector<double>>& a,
                               const std::vector<std::vector<double>>& b);

// The second group `train --zero 3` gathers parameters on (models::train's `gather` argument), made as the train
// program makes it: a group of the same ranks over `store` named `name`; null when zero != 3.
std::shared_ptr<dist::ProcessGroup> zero3_gather_group(int zero, int rank, int world, dist::Store& store,
                                                       const std::string& backend,
                                                       dist::ProcessGroupOptions options = {},
                                                       const std::string& name = "train-zero3-gather");

}  // namespace ddp::testing
