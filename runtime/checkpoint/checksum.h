// checksum.h - CRC-32 (zlib's polynomial) of tensor bytes, stored per tensor in a training checkpoint's
// metadata ("crc32:<tensor name>" -> 8 lowercase hex digits) and verified on load, so a flipped byte in the
// data section is an error naming the file and the tensor instead of a silently different model; and the
// CRC-32 of the header's content ("header_crc32"), so a flipped byte in the metadata (a step, a renamed or
// deleted setting) or in the tensor table is an error too, not a resume with other settings.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/checkpoint/safetensors.h"

namespace ddp::checkpoint {

// CRC-32 of n bytes (the value zlib's crc32() and Python's zlib.crc32() give).
uint32_t crc32_of(const void* data, size_t n);

// "0a1b2c3d": the metadata text of a checksum.
std::string crc32_text(uint32_t crc);

// The metadata key holding the checksum of tensor `name`.
std::string checksum_key(std::string_view tensor_name);
inline constexpr std::string_view kChecksumKeyPrefix = "crc32:";

// The metadata key holding the checksum of the header's content (training checkpoint format v3).
inline constexpr std::string_view kHeaderChecksumKey = "header_crc32";

// CRC-32 of a header's content in a canonical byte form: every metadata entry except kHeaderChecksumKey
// (sorted by key), then every tensor's name, dtype and shape (sorted by name), each field length-prefixed.
// The JSON spelling (spacing, key order, escapes) does not change it; any change of a key, a value, a
// tensor's name, dtype or dimension does. Data offsets are not in it: the tensors must tile the data
// section (the reader checks), and each tensor's own CRC-32 covers its bytes. `tensors` takes the views
// of a write or NamedBuffer::view() of a read; their data is not read.
uint32_t header_crc32_of(const std::map<std::string, std::string>& metadata,
                         const std::vector<TensorView>& tensors);

}  // namespace ddp::checkpoint
