// train_deterministic.h - the pieces of `train --deterministic` outside its step (docs/determinism.md): the
// dropout streams tied to a micro-batch's global number, the loader position in world-independent units for
// checkpoints, and the parameters' checksum the summary prints.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/nn/module.h"

namespace ddp::models {

// Every Dropout's generator (its buffer "rng": seed, offset) draws from stream `micro_batch` (offset
// micro_batch * 2^32), so a micro-batch's masks do not depend on which rank runs it.
void set_dropout_streams(nn::Module& model, int64_t micro_batch);

// A checkpoint's "batches_in_epoch" in the deterministic mode counts the step's micro-batches over all ranks
// (steps done in the epoch x micro_batches), so a run resumes at any world size.
int64_t global_micro_batches_consumed(int64_t rank_batches_consumed, int64_t rank_micro_batches,
                                      int64_t micro_batches);
int64_t rank_batches_consumed(int64_t global_consumed, int64_t rank_micro_batches, int64_t micro_batches);

// A resume across the modes is refused: the checkpoint's loader position counts rank batches in the normal
// mode and micro-batches over all ranks in the deterministic one. `saved_config`: the checkpoint's run
// configuration (JSON); names `path` and the flag that makes them agree.
void check_resume_mode(const std::string& saved_config, bool deterministic, const std::string& path);

// FNV-1a over the bytes of every parameter, in the module's order.
uint64_t parameter_checksum(const nn::Module& model);

}  // namespace ddp::models
