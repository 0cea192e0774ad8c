// gzip_file.h - writing a byte buffer as a gzip file (zlib). Tests use it to make gzip'd IDX files; tools
// can use it to ship compressed data. zlib is linked privately to the runtime, so this is the way for code
// outside the runtime library to produce gzip files.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::data {

// Writes `bytes` gzip-compressed to `path` (replacing it). level: 1 (fast) .. 9
// (small). Errors name the path.
void write_gzip_file(const std::string& path, const std::vector<uint8_t>& bytes, int level = 6);

}  // namespace ddp::data
