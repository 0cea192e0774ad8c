// training_checkpoint.h - a whole training state in one safetensors file: the module's parameters and
// buffers ("model.<name>"), the optimizer's state ("optim.<name>.<state>"), and in the metadata the step,
// epoch, position in the epoch, seeds, the optimizer's kind, a CRC-32 of every tensor, a free-form JSON of
// the run's configuration, and a CRC-32 of the header's content (all of that metadata and the tensor table).
// Rank 0 writes (the write is atomic); every rank reads.
//
// Loading is all or nothing: every check runs before anything is copied, and any mismatch is an error naming
// the file, the tensor or metadata field, and the fix. Checked: the format, the header's checksum (whenever
// the file has one), every required field's presence, every tensor's checksum, every model tensor's
// presence, shape and dtype, no unknown tensor, the optimizer's kind and, per parameter, its complete state
// (a missing, renamed or extra "optim.*" tensor is an error, not a state silently reset to zero), and
// non-negative step / epoch / position. LoadOptions::reset_optimizer skips the optimizer part on purpose.
// Older files still load, with a warning: version 2 has no header checksum (its unknown fields are named),
// version 1 no checksums at all and no optimizer kind.
#pragma once
#include <map>
#include <string>
#include <vector>

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
  // Filled by a load: the optimizer that wrote the file ("adamw", "sgd"; "" when none or unknown).
  std::string optimizer;
};

struct LoadOptions {
  // Load the model and the position, but leave the optimizer's state fresh: for switching optimizers, or to
  // discard a state on purpose. Without it, a checkpoint of another optimizer is an error.
  bool reset_optimizer = false;
  // The configuration of the resuming run (a flat JSON object, like TrainingState::config_json). When set,
  // every key it shares with the checkpoint's "config" must have the same value, except the keys listed in
  // config_keys_may_differ; a difference is an error naming the key ("--batch-size") and both values. A key
  // only one side has is not compared (a flag of an older or newer version) and is named in a warning.
  std::string live_config;
  std::vector<std::string> config_keys_may_differ;
};

// Writes module (+ optimizer state when given) and state to path atomically.
void save_training_checkpoint(const std::string& path, const nn::Module& module,
                              const optim::Optimizer* optimizer, const TrainingState& state);

// An optimizer's whole state held apart from an optimizer object: by parameter name exactly as
// optim::Optimizer::state() of the plain optimizer over the whole model names it ("fc1.weight.exp_avg"), e.g.
// ShardedOptimizer::consolidated_state() of ZeRO-2/3; its kind as optimizer_kind() names it ("adamw", "sgd")
// and its step count (Optimizer::steps()).
struct OptimizerSnapshot {
  std::string kind;
  int64_t steps = 0;
  std::map<std::string, Tensor> state;
};

// The same file from such a snapshot: identical to what the plain optimizer with that state writes.
void save_training_checkpoint(const std::string& path, const nn::Module& module,
                              const OptimizerSnapshot& optimizer, const TrainingState& state);

// Loads into module (+ optimizer unless options.reset_optimizer) in place and returns the state. Throws
// ddp::Error naming the file and the first problem; nothing is modified when it throws.
TrainingState load_training_checkpoint(const std::string& path, nn::Module& module,
                                       optim::Optimizer* optimizer, const LoadOptions& options = {});

// "adamw", "sgd", or "" for an optimizer this file does not know.
std::string optimizer_kind(const optim::Optimizer& optimizer);

}  // namespace ddp::checkpoint
