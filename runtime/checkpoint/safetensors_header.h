// safetensors_header.h - the JSON header of a safetensors file: building it for a write, and parsing plus
// validating it (every field, every offset) for a read. Knows nothing of files; safetensors.cpp does the I/O.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/checkpoint/safetensors.h"

namespace ddp::checkpoint {

// One tensor as the header describes it; offsets are relative to the data section, end exclusive.
struct HeaderEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct ParsedHeader {
  std::vector<HeaderEntry> entries;  // sorted by data offset
  std::map<std::string, std::string> metadata;
};

// Deepest nesting of objects and arrays a header may have: the header object, a tensor entry (or the
// metadata object), a shape or data_offsets array. Checked on the raw text before the JSON parser runs.
inline constexpr int kMaxHeaderDepth = 3;

// The deepest nesting of objects and arrays in JSON text (brackets inside strings do not count), without
// parsing it. Stops at the first bracket deeper than `limit` and returns that depth, with its byte offset in
// *where when given. Run before a recursive JSON parser on untrusted text.
int json_nesting_depth(std::string_view text, int limit, size_t* where = nullptr);

// `text` for an error message: at most 80 characters, then "... (N characters)". Names and values read from a
// file go through it, so a hostile file cannot make an error message huge.
std::string message_excerpt(std::string_view text);

// Parses `json_text` and checks it against a data section of `data_bytes` bytes: known dtypes, non-negative
// dims, shape x dtype size == offsets length, offsets in range, contiguous, covering the section, no
// duplicate keys anywhere. Throws ddp::Error that starts with "safetensors file '<source>': ".
ParsedHeader parse_header(std::string_view json_text, uint64_t data_bytes, const std::string& source);

// Header JSON (compact, "__metadata__" first when not empty, tensors in `order` with consecutive offsets),
// padded with spaces so its length is a multiple of 8. The views must have been validated.
std::string encode_header(const std::vector<const TensorView*>& order,
                          const std::map<std::string, std::string>& metadata);

// Checks a tensor to be written (dims >= 0, bytes == numel x dtype size, data present, name not reserved)
// and returns its byte size. Throws ddp::Error naming the tensor.
uint64_t checked_tensor_bytes(const TensorView& t);

}  // namespace ddp::checkpoint
