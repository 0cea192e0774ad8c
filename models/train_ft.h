// train_ft.h - fault-tolerant training (`train --fault-tolerant` under `ddprun --fault-tolerant`,
// docs/fault-tolerance.md): a rank that dies leaves the job and the others go on at the next step, without a
// restart; a replacement joins at a step boundary and takes its state from a live peer over the network.
//
// Per step, the healthy path is plain DDP: the gradient all-reduce is the step's only collective and nothing
// is added to it (liveness travels on each worker's heartbeat thread, ft_client.h). A step commits on a rank
// when its all-reduces completed there; one rank's completion means every rank contributed its share. When
// ddprun's coordinator publishes a new membership epoch (a rank lost or joined), every member aborts the
// group it is in, builds the group of the new epoch (same backend choice, keys of their own), takes the state
// of the member with the most committed steps (parameters, buffers, optimizer state and step count, data
// position: one broadcast each, so the healed state is bitwise the source's), rebuilds DDP, and redoes the
// step over the new world from the committed data position (runtime/data/elastic_sampler.h: no sample is
// lost or used twice). No rank ever applies a partially reduced gradient: the optimizer runs only after
// every all-reduce of the step completed.
//
// --zero 1: each optimizer shard also lives on a buddy rank (train_ft_zero.h). Checkpoints: rank 0 of the group
// writes them alone (atomically); --resume reads one. Refused by name: --zero 2/3, --grad-accum > 1, --sync-bn,
// --deterministic, --comm-hook other than allreduce, --uneven-steps, --reset-optimizer, checkpoints with --zero 1.
#pragma once
#include <string>
#include <vector>

#include "models/train.h"
#include "runtime/distributed/env.h"
#include "runtime/optim/lr_schedule.h"

namespace ddp::models {

// One injected fault (tests and the fault campaign): the process of (slot, incarnation) kills itself with
// SIGKILL in `phase` of step `step` (1-based): forward | backward (inside it, buckets in flight) | optimizer
// (after clipping, before the step) | commit (after the step, before the position moves) | recovery (inside
// the state transfer of the first recovery at or after that step) | checkpoint (while it writes the checkpoint
// of that step); stall: not a kill, the process sleeps 3 x
// the heartbeat deadline in the forward of that step (slow but alive: it must not be thrown out).
struct FtFault {
  int slot = -1;
  int incarnation = 0;
  int64_t step = 1;
  std::string phase = "forward";
};
// "slot=1,step=5,phase=backward[,incarnation=0];slot=2,step=5,phase=forward" (empty: none).
std::vector<FtFault> parse_ft_faults(const std::string& spec);

struct FtRunOptions {
  // A folder for the run's record: per process the samples it trained on in each attempted step and the
  // steps it committed (ft.slot<k>.inc<i>.log), and its final parameters (final.slot<k>.inc<i>.bin, float64).
  // `train --ft-check DIR` checks them. Empty: none.
  std::string log_dir;
  std::vector<FtFault> faults;
};

// The learning-rate schedule of a fault-tolerant run (and of --ft-check's reference): its length is planned at
// the launch world, since the steps of an epoch change with the world and the schedule must not.
optim::WarmupCosine ft_schedule(const TrainOptions& o, int64_t epoch_size, int launch_world);

// Runs this worker under ddprun --fault-tolerant (DDP_FT=1 in the environment). Returns when training ends;
// throws ddp::Error naming the cause when the job cannot go on (below --min-ranks, coordinator lost, removed).
TrainResult train_fault_tolerant(const TrainOptions& o, const dist::DistEnv& env, const std::string& backend,
                                 const FtRunOptions& ft);

// `train --ft-check DIR`: from DIR's record, the committed schedule (which samples made each step's global
// batch), checked: every step committed once, every sample of each finished epoch used exactly once, every
// process's final parameters bitwise equal, and equal (max |difference| <= tolerance) to one process
// training on the same global batches. Prints what it found; returns 0 when everything holds, 1 otherwise.
int check_fault_tolerant_run(const TrainOptions& o, const std::string& dir, double tolerance = 1e-12);

}  // namespace ddp::models
