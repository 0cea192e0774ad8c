// train_eval.h - evaluation of `train`: the loss (and accuracy for classifiers) over the validation split,
// each sample counted once over all ranks, with rank 0's buffers (BatchNorm statistics) and no gradients.
#pragma once
#include <cmath>
#include <cstdint>

#include "models/train_setup.h"

namespace ddp::models {

struct EvalResult {
  double loss = NAN;      // mean cross-entropy per sample (per token for gpt)
  double accuracy = -1;   // classifiers; -1 for token models
};

// Collective. Prints one line naming `step` when `talk`.
EvalResult evaluate(const TrainOptions& o, TrainSetup& s, dist::ProcessGroup& pg, int64_t step, bool talk);

}  // namespace ddp::models
