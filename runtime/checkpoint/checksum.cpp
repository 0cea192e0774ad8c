// checksum.cpp - CRC-32 through zlib, of tensor bytes and of a header's canonical form (see checksum.h).
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

namespace {
// The canonical form: a tag, then length-prefixed fields, so no two different headers encode alike
// ("ab"+"c" and "a"+"bc" differ).
class CanonicalBytes {
 public:
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>(v >> (8 * i)));
  }
  void text(std::string_view s) {
    u64(s.size());
    bytes_.append(s);
  }
  uint32_t crc() const { return crc32_of(bytes_.data(), bytes_.size()); }

 private:
  std::string bytes_ = "ddp.cpp header content v3";
};
}  // namespace

uint32_t header_crc32_of(const std::map<std::string, std::string>& metadata,
                         const std::vector<TensorView>& tensors) {
  CanonicalBytes out;
  out.u64(metadata.size() - metadata.count(std::string(kHeaderChecksumKey)));
  for (const auto& [key, value] : metadata) {  // std::map: sorted by key
    if (key == kHeaderChecksumKey) continue;
    out.text(key);
    out.text(value);
  }
  std::vector<const TensorView*> by_name;
  for (const TensorView& t : tensors) by_name.push_back(&t);
  std::sort(by_name.begin(), by_name.end(),
            [](const TensorView* a, const TensorView* b) { return a->name < b->name; });
  out.u64(by_name.size());
  for (const TensorView* t : by_name) {
    out.text(t->name);
    out.text(safetensors_dtype_code(t->dtype));
    out.u64(t->shape.size());
    for (int64_t d : t->shape) out.u64(static_cast<uint64_t>(d));
  }
  return out.crc();
}

}  // namespace ddp::checkpoint
