// index_errors.cpp - the texts of index_errors.h.
#include "runtime/ops/index_errors.h"

namespace ddp::ops {

std::string embedding_index_error(const Shape& shape, int64_t rows, const std::string& table, int64_t value,
                                  int64_t position) {
  return "embedding: index " + std::to_string(value) + " at position " + std::to_string(position) +
         " (flat index into indices of shape " + shape_str(shape) + ") is outside [0, " +
         std::to_string(rows) + ") for " + (table.empty() ? "a table" : "the table '" + table + "'") +
         " of " + std::to_string(rows) + " rows; fix the token ids or enlarge the vocabulary";
}

std::string cross_entropy_target_error(const Shape& shape, int64_t classes,
                                       std::optional<int64_t> ignore_index, int64_t value, int64_t position) {
  return "cross_entropy: target " + std::to_string(value) + " at position " + std::to_string(position) +
         " (flat index into targets of shape " + shape_str(shape) + ") is outside [0, " +
         std::to_string(classes) + ") for " + std::to_string(classes) + " classes" +
         (ignore_index ? " and is not the ignore_index " + std::to_string(*ignore_index) : std::string()) +
         "; fix the labels or the number of classes";
}

}  // namespace ddp::ops
