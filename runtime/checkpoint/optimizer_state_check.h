// optimizer_state_check.h - checks the "optim.*" tensors of a training checkpoint against the live optimizer
// before anything is loaded: same optimizer kind, every tensor the state of a known parameter, every
// parameter's state complete or absent, shapes and dtypes matching. An optimizer's loader fills a missing
// state with zeros, so without this a renamed or deleted tensor would silently restart that parameter's
// moments.
#pragma once
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/optim/optimizer.h"

namespace ddp::checkpoint {

// The state names an optimizer kind keeps per parameter ("adamw": exp_avg, exp_avg_sq, step; "sgd":
// momentum_buffer); empty for an unknown kind.
std::vector<std::string> optimizer_state_names(const std::string& kind);

// The kind whose state names `optim_tensors` (names without the "optim." prefix) use, for files that do not
// record it; "" when there is no state.
std::string infer_optimizer_kind(const std::vector<const NamedBuffer*>& optim_tensors);

// Throws ddp::Error naming `path` and the fix (--optimizer, --reset-optimizer) when the kinds differ.
// saved_kind: the kind the file records or infer_optimizer_kind's guess ("": nothing to compare).
void check_optimizer_kind(const std::string& path, const std::string& saved_kind, const std::string& live_kind);

// Throws ddp::Error naming `path`, the tensor and the fix on any mismatch of the state with the optimizer's
// parameters. optim_tensors: the file's tensors whose names start with "optim." (names unchanged).
void check_optimizer_state(const std::string& path, int64_t optimizer_steps,
                           const std::vector<const NamedBuffer*>& optim_tensors,
                           const optim::Optimizer& live, const std::string& live_kind);

}  // namespace ddp::checkpoint
