// train_checkpoint.h - checkpoints of `train`: resuming a run from --resume (model, optimizer, the step and
// the loader's position, so the resumed run continues exactly) and saving one (rank 0 writes
// ckpt-step<N>.safetensors atomically and points `latest` at it).
#pragma once
#include <cstdint>
#include <string>

#include "models/train_setup.h"

namespace ddp::models {

struct ResumePoint {
  int64_t step = 0, epoch = 0;
  std::string path;  // the checkpoint resumed from; empty for a fresh start
};

// With --resume: loads the checkpoint into the model and optimizer and moves the loader to where it
// stopped; else starts the loader's epoch 0. Prints a line when `talk`. A checkpoint of any --zero stage and
// world size loads at any other (--zero 2/3: into this rank's shards, through a whole copy on the CPU).
ResumePoint resume_training(const TrainOptions& o, TrainSetup& s, bool talk);

// Writes the checkpoint of `step` into --checkpoint-dir and returns its path ("" without --checkpoint-dir).
// Collective: with --zero 1 every rank's optimizer shard goes to rank 0 first, with --zero 2/3 every rank
// consolidates the whole optimizer state (the caller holds the gathered scope of the whole parameters); rank
// 0 writes, all ranks wait for the write.
std::string save_checkpoint(const TrainOptions& o, TrainSetup& s, dist::ProcessGroup& pg, int64_t step,
                            bool talk);

}  // namespace ddp::models
