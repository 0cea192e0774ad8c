// training_checkpoint.h - a whole training state in one safetensors file: the module's parameters and
// buffers ("model.<name>"), the optimizer's state ("optim.<name>.<state>"), and in the metadata the step,
// epoch, position in the epoch, seeds and a free-form JSON of the run's configuration. Rank 0 writes (the
// write is atomic); every rank reads. Loading checks every name, shape and dtype against the live model and
// says exactly what does not match.
#pragma once
#include <map>
#include <string>

#include "runtime/nn/module.h"
#include "runtime/optim/optimizer.h"

namespace ddp::checkpoint {

struct TrainingState {
  int64_t step = 0;              // optimizer steps done
  int64_t epoch = 0;             // current epoch
  int64_t batches_in_epoch = 0;  // batches of `epoch` already consumed
  uint64_t seed = 0;
  std::string config_json;                   // the run's flags, for humans and for checking a resume
  std::map<std::string, std::string> extra;  // anything else (e.g. a dropout generator offset)
};

// Writes module (+ optimizer state when given) and state to path atomically.
void save_training_checkpoint(const std::string& path, const nn::Module& module,
                              const optim::Optimizer* optimizer, const TrainingState& state);

// Loads into module (+ optimizer) in place and returns the state. Throws ddp::Error naming the file and the
// first problem: a missing or unexpected tensor, a shape or dtype mismatch, missing metadata.
TrainingState load_training_checkpoint(const std::string& path, nn::Module& module,
                                       optim::Optimizer* optimizer);

}  // namespace ddp::checkpoint
