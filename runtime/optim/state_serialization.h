// state_serialization.h - an optimizer state (name -> tensor) as one byte string and back, for moving it
// through collectives (ZeroRedundancyOptimizer::consolidate_state_dict). Tensors travel as host copies with
// their dtype and shape; the format is private to one run (no versioning, same machine byte order).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ddp::optim {

std::vector<char> serialize_state(const std::map<std::string, Tensor>& state);
// Throws a clear error on a truncated or malformed buffer. Tensors come back on the CPU.
std::map<std::string, Tensor> deserialize_state(const char* data, size_t size);

}  // namespace ddp::optim
