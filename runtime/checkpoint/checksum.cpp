// checksum.cpp - CRC-32 through zlib (see checksum.h).
#include "runtime/checkpoint/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <limits>

namespace ddp::checkpoint {

uint32_t crc32_of(const void* data, size_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const Bytef* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes a 32-bit length: feed large tensors in pieces
    const size_t piece = std::min<size_t>(n, std::numeric_limits<uInt>::max());
    crc = ::crc32(crc, p, static_cast<uInt>(piece));
    p += piece;
    n -= piece;
  }
  return static_cast<uint32_t>(crc);
}

std::string crc32_text(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

std::string checksum_key(std::string_view tensor_name) {
  return std::string(kChecksumKeyPrefix) + std::string(tensor_name);
}

}  // namespace ddp::checkpoint
