// idx.h - reader for IDX files, the format of MNIST and Fashion-MNIST, gzip'd or plain.
//
// Layout (all integers big-endian):
//   magic   4 bytes: 0x00, 0x00, type code (0x08 = unsigned byte, the only type read here), number of dims
//   dims    4 bytes each (unsigned)
//   data    product(dims) elements, row-major, nothing after them
// Images are magic 0x00000803 (N, rows, cols), labels 0x00000801 (N).
//
// Validation is strict: a wrong magic, a header or data cut short (also a gzip stream cut short or failing
// its checksum), bytes left over after the data, a zero dimension, or label and image counts that differ all
// raise ddp::Error naming the file and the problem. A missing file names the Debian package that installs it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::data {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dims
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dim
constexpr const char* kFashionMnistPackage = "dataset-fashion-mnist";

// The contents of one IDX file of unsigned bytes.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Reads `path` (gzip'd or plain: detected from the content) and checks its magic equals `expected_magic`.
// `debian_package` is named in the error when the file is missing (empty: no package hint).
IdxArray read_idx(const std::string& path, uint32_t expected_magic,
                  const std::string& debian_package = kFashionMnistPackage);

// Images (N, rows, cols) and labels (N) of a classification set, read and checked against each other.
struct IdxImagesAndLabels {
  IdxArray images;
  IdxArray labels;
};
IdxImagesAndLabels read_idx_images_and_labels(const std::string& images_path, const std::string& labels_path,
                                              const std::string& debian_package = kFashionMnistPackage);

}  // namespace ddp::data
