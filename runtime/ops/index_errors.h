// index_errors.h - the messages of a bad embedding index and a bad cross-entropy target. One text for both
// places an error is found: the CPU ops raise it at once; on a GPU the op hands the same function to its
// device-side check (runtime/tensor/device_checks.h), which raises it at the next host read.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// Index `value` at flat position `position` of indices of `shape`, outside [0, rows) of the embedding table
// `table` (its name; empty: unnamed).
std::string embedding_index_error(const Shape& shape, int64_t rows, const std::string& table, int64_t value,
                                  int64_t position);
// Target `value` at flat position `position` of targets of `shape`, outside [0, classes) and not the
// ignore index.
std::string cross_entropy_target_error(const Shape& shape, int64_t classes,
                                       std::optional<int64_t> ignore_index, int64_t value, int64_t position);

}  // namespace ddp::ops
