// safetensors.h - read and write the safetensors checkpoint format on raw bytes (dtype + shape + bytes),
// independent of the Tensor class. Writes are atomic (temp file, fsync, rename, fsync dir); reads validate
// every field of the header against the file and never trust a length before checking it.
//
// Format (docs/checkpoint.md): u64 little-endian N, then N bytes of JSON header (padded with spaces to a
// multiple of 8), then the data section. Header: {"__metadata__": {"k": "v"}, "name": {"dtype": "F32",
// "shape": [2, 3], "data_offsets": [begin, end]}, ...}; offsets are relative to the data section, tensors
// are contiguous, little-endian, and together cover the data section exactly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/dtype.h"

namespace ddp::checkpoint {

// A tensor to write: borrowed bytes (not copied), nbytes must equal numel(shape) * dtype_size(dtype).
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // [] is a scalar (one element); a 0 anywhere makes an empty tensor
  const void* data = nullptr;  // may be null only when nbytes == 0
  size_t nbytes = 0;
};

// A tensor read from a file: owns its bytes (little-endian, row-major).
struct NamedBuffer {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;
  TensorView view() const { return {name, dtype, shape, bytes.data(), bytes.size()}; }
};

// The content of one safetensors file. Tensors appear in the order of their data offsets.
struct SafetensorsContent {
  std::vector<NamedBuffer> tensors;
  std::map<std::string, std::string> metadata;

  // The tensor named `name`, or nullptr.
  const NamedBuffer* find(std::string_view name) const;
};

// Safetensors dtype code ("F32", "BF16", ...) of a DType, and the reverse (false when unknown).
std::string_view safetensors_dtype_code(DType t);
bool parse_safetensors_dtype(std::string_view code, DType* out);

struct WriteOptions {
  // Bytes handed to write(2) at a time; progress is reported after each chunk.
  size_t chunk_bytes = size_t{4} << 20;
  // Called after each chunk with the bytes written to the temp file so far (header included). Tests use it
  // to kill a writer mid-file; an exception thrown here aborts the write and removes the temp file.
  std::function<void(uint64_t bytes_written)> on_progress;
};

// Writes `tensors` and `metadata` to `path` atomically: "<path>.tmp.<pid>" is written and fsynced, renamed
// over `path`, and the directory is fsynced. A crash at any point leaves either the old file or the new one.
// Tensors are laid out by descending element size, then by name (as the reference writer does), so each
// tensor starts at a multiple of its element size. Throws ddp::Error on bad input or an I/O failure.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const WriteOptions& options = {});

// The exact bytes write_safetensors would put in a file (for tests and in-memory use).
std::vector<uint8_t> encode_safetensors(const std::vector<TensorView>& tensors,
                                        const std::map<std::string, std::string>& metadata = {});

// Reads and validates `path`. Any inconsistency (truncation, lying lengths, bad JSON, unknown dtype, size
// mismatch, overlapping or gapped offsets, negative dims, duplicate names) throws ddp::Error naming the file
// and the problem. Memory used is bounded by the file's real size.
SafetensorsContent read_safetensors(const std::string& path);

// Same validation on bytes already in memory; `source` names them in error messages.
SafetensorsContent parse_safetensors(const uint8_t* data, size_t size,
                                     const std::string& source = "<memory>");

// Largest header accepted (as the reference implementation: 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

}  // namespace ddp::checkpoint
