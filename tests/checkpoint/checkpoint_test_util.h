// checkpoint_test_util.h - helpers shared by the checkpoint tests: a scratch directory, raw file access,
// hand-built safetensors bytes (to craft exactly the corruption a test wants), and a format-aware editor of
// training checkpoints (to reach the checks behind the checksums).
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/checkpoint/checksum.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/error.h"

namespace ddp::checkpoint::testing {

// A fresh directory under the test temp dir, removed with everything in it at the end of the scope.
class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = ::testing::TempDir() + "ddp_ckpt_XXXXXX";
    char* made = ::mkdtemp(templ.data());
    if (!made) throw std::runtime_error("mkdtemp failed for " + templ);
    path_ = made;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void write_raw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// 8-byte little-endian length of `header` (or `declared_length` when given), the header, then `data_bytes`
// bytes of data (value i & 0xff at position i).
inline std::vector<uint8_t> raw_safetensors(const std::string& header, size_t data_bytes,
                                            int64_t declared_length = -1) {
  uint64_t n = declared_length >= 0 ? static_cast<uint64_t>(declared_length) : header.size();
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i & 0xff));
  return out;
}

// The ddp::Error message parse_safetensors raises for `bytes`, or "" when they parse.
inline std::string parse_error(const std::vector<uint8_t>& bytes,
                               const std::string& source = "case.safetensors") {
  try {
    parse_safetensors(bytes.data(), bytes.size(), source);
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "";
}

// Rewrites a training checkpoint through `edit` as an editor that knows the format would: with every tensor's
// CRC-32 recomputed when fix_tensor_checksums, and the header checksum recomputed whenever the edited file
// still has one, so the checks behind the checksums are what a test reaches.
inline void rewrite_training_checkpoint(const std::string& path,
                                        const std::function<void(SafetensorsContent&)>& edit,
                                        bool fix_tensor_checksums = true) {
  SafetensorsContent c = read_safetensors(path);
  edit(c);
  if (fix_tensor_checksums) {
    for (auto it = c.metadata.begin(); it != c.metadata.end();)
      it = it->first.rfind(kChecksumKeyPrefix, 0) == 0 ? c.metadata.erase(it) : std::next(it);
    for (const NamedBuffer& t : c.tensors)
      c.metadata[checksum_key(t.name)] = crc32_text(crc32_of(t.bytes.data(), t.bytes.size()));
  }
  std::vector<TensorView> views;
  for (const NamedBuffer& t : c.tensors) views.push_back(t.view());
  if (auto it = c.metadata.find(std::string(kHeaderChecksumKey)); it != c.metadata.end())
    it->second = crc32_text(header_crc32_of(c.metadata, views));
  write_safetensors(path, views, c.metadata);
}

}  // namespace ddp::checkpoint::testing
