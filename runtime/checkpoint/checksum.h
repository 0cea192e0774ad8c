// checksum.h - CRC-32 (zlib's polynomial) of tensor bytes, stored per tensor in a training checkpoint's
// metadata ("crc32:<tensor name>" -> 8 lowercase hex digits) and verified on load, so a flipped byte in the
// data section is an error naming the file and the tensor instead of a silently different model.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddp::checkpoint {

// CRC-32 of n bytes (the value zlib's crc32() and Python's zlib.crc32() give).
uint32_t crc32_of(const void* data, size_t n);

// "0a1b2c3d": the metadata text of a checksum.
std::string crc32_text(uint32_t crc);

// The metadata key holding the checksum of tensor `name`.
std::string checksum_key(std::string_view tensor_name);
inline constexpr std::string_view kChecksumKeyPrefix = "crc32:";

}  // namespace ddp::checkpoint
