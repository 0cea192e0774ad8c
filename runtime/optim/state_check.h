// state_check.h - checks a whole optimizer state ("<param>.<state>" -> tensor, as Optimizer::state() names
// it) against the parameters it is for, BEFORE any of it is loaded: every entry names a parameter and a state
// of this optimizer kind, has the parameter's shape and dtype (a step count: an I64 scalar), and each
// parameter's state is complete or absent (absent: the parameter never stepped). It depends only on the
// input and the parameters' names, shapes and dtypes - never on which rank holds what - so every rank of a
// sharded optimizer reaches the same verdict with the same message, and a refused load changes nothing.
// It never modifies anything.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "runtime/nn/module.h"

namespace ddp::optim {

class Optimizer;

// The state an optimizer keeps per parameter: tensors shaped like it, and one I64 scalar (or none).
struct StateKinds {
  std::vector<std::string> tensors;  // AdamW: exp_avg, exp_avg_sq; SGD: momentum_buffer
  std::string scalar;                // AdamW: step; SGD: none
};

// SGD's and AdamW's kinds; empty kinds for another optimizer (its state cannot be checked here).
StateKinds state_kinds_of(const Optimizer& optimizer);

// Throws ddp::Error "<who>: ..." naming the first entry at fault (in name order) and the fix.
void check_whole_state(const std::string& who, const std::vector<nn::NamedTensor>& params,
                       const StateKinds& kinds, const std::map<std::string, Tensor>& state, int64_t steps);

}  // namespace ddp::optim
