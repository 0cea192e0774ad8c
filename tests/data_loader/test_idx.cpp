// test_idx.cpp - the IDX reader on small generated files (plain and gzip'd), every corruption it must refuse,
// Fashion-MNIST loading and normalisation on a generated directory, and the real test split when installed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "runtime/core/error.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/data/gzip_file.h"
#include "runtime/data/idx.h"
#include "tests/data_loader/scratch_dir.h"

namespace ddp::data {
namespace {

using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

// An IDX file: magic, dims big-endian, then the payload as given (lets tests make inconsistent files).
std::vector<uint8_t> make_idx(uint32_t magic, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out;
  auto put32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 37 + salt);
  return v;
}

// The ddp::Error message of read_idx on `path`, or "" when it succeeds.
std::string idx_error(const std::string& path, uint32_t magic) {
  try {
    read_idx(path, magic);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Writes `bytes` both plainly and gzip'd and expects the same error text from both.
void expect_both_fail(const ScratchDir& dir, const std::string& name, const std::vector<uint8_t>& bytes,
                      uint32_t magic, const std::string& expected) {
  const std::string plain = dir.file(name), gz = dir.file(name + ".gz");
  write_bytes(plain, bytes);
  write_gzip_file(gz, bytes);
  for (const std::string& path : {plain, gz}) {
    SCOPED_TRACE(path);
    const std::string msg = idx_error(path, magic);
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << "error must name the file: " << msg;
  }
}

TEST(Idx, ReadsPlainAndGzipImagesAndLabels) {
  ScratchDir dir;
  const auto pixels = pattern(5 * 3 * 4, 1);
  const auto images = make_idx(kIdxImagesMagic, {5, 3, 4}, pixels);
  write_bytes(dir.file("img"), images);
  write_gzip_file(dir.file("img.gz"), images);
  const auto gz = read_bytes(dir.file("img.gz"));
  ASSERT_GE(gz.size(), 2u);
  EXPECT_EQ(gz[0], 0x1f);  // really gzip'd, not a plain copy
  EXPECT_EQ(gz[1], 0x8b);
  for (const char* name : {"img", "img.gz"}) {
    IdxArray a = read_idx(dir.file(name), kIdxImagesMagic);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{5, 3, 4}));
    EXPECT_EQ(a.data, pixels);
  }
  const auto labels = pattern(5, 3);
  write_gzip_file(dir.file("lab.gz"), make_idx(kIdxLabelsMagic, {5}, labels));
  IdxImagesAndLabels both = read_idx_images_and_labels(dir.file("img.gz"), dir.file("lab.gz"));
  EXPECT_EQ(both.images.data, pixels);
  EXPECT_EQ(both.labels.dims, (std::vector<int64_t>{5}));
  EXPECT_EQ(both.labels.data, labels);
}

TEST(Idx, RefusesWrongMagic) {
  ScratchDir dir;
  expect_both_fail(dir, "labels_as_images", make_idx(kIdxLabelsMagic, {4}, pattern(4, 0)), kIdxImagesMagic,
                   "bad magic number 0x00000801, expected 0x00000803");
  expect_both_fail(dir, "not_idx", make_idx(0x89504E47, {1, 1, 1}, {7}), kIdxImagesMagic, "not an IDX file");
  expect_both_fail(dir, "float_type", make_idx(0x00000D03, {1, 1, 1}, {0, 0, 0, 0}), kIdxImagesMagic,
                   "only the unsigned-byte type");
}

TEST(Idx, RefusesTruncatedFiles) {
  ScratchDir dir;
  expect_both_fail(dir, "empty", {}, kIdxImagesMagic, "less than the 4-byte magic");
  expect_both_fail(dir, "half_magic", {0, 0}, kIdxImagesMagic, "less than the 4-byte magic");
  auto header_cut = make_idx(kIdxImagesMagic, {2, 3}, {});  // third dim missing
  expect_both_fail(dir, "header_cut", header_cut, kIdxImagesMagic, "truncated inside the header");
  auto data_cut = make_idx(kIdxImagesMagic, {2, 3, 4}, pattern(23, 0));  // 24 needed
  expect_both_fail(dir, "data_cut", data_cut, kIdxImagesMagic, "need 24 data bytes");
}

TEST(Idx, RefusesDimsThatDoNotMatchTheFileSize) {
  ScratchDir dir;
  expect_both_fail(dir, "trailing", make_idx(kIdxLabelsMagic, {3}, pattern(5, 0)), kIdxLabelsMagic,
                   "2 bytes follow the 3 data bytes");
  expect_both_fail(dir, "zero_dim", make_idx(kIdxImagesMagic, {4, 0, 28}, {}), kIdxImagesMagic,
                   "dimension 1 is 0");
  // A header claiming 2^96 bytes must fail on the size, not try to allocate it.
  expect_both_fail(dir, "huge",
                   make_idx(kIdxImagesMagic, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, pattern(10, 0)),
                   kIdxImagesMagic, "the header is corrupt");
  // Plausible dims, far more than the file holds.
  expect_both_fail(dir, "lying", make_idx(kIdxImagesMagic, {60000, 28, 28}, pattern(100, 0)), kIdxImagesMagic,
                   "holds only 100");
}

TEST(Idx, RefusesBrokenGzipStreams) {
  ScratchDir dir;
  const auto bytes = make_idx(kIdxImagesMagic, {20, 28, 28}, pattern(20 * 28 * 28, 5));
  write_gzip_file(dir.file("ok.gz"), bytes, 1);
  const auto gz = read_bytes(dir.file("ok.gz"));
  ASSERT_GT(gz.size(), 40u);

  // Cut the compressed stream in the middle.
  write_bytes(dir.file("cut.gz"),
              std::vector<uint8_t>(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  std::string msg = idx_error(dir.file("cut.gz"), kIdxImagesMagic);
  EXPECT_NE(msg.find("cut short"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.file("cut.gz")), std::string::npos) << msg;

  // Corrupt the CRC-32 in the 8-byte trailer: the data decompresses but fails its check.
  auto bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 0xFF;
  write_bytes(dir.file("crc.gz"), bad_crc);
  msg = idx_error(dir.file("crc.gz"), kIdxImagesMagic);
  EXPECT_NE(msg.find("corrupt"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.file("crc.gz")), std::string::npos) << msg;
}

TEST(Idx, RefusesLabelCountThatDiffersFromImageCount) {
  ScratchDir dir;
  write_bytes(dir.file("img"), make_idx(kIdxImagesMagic, {5, 2, 2}, pattern(20, 0)));
  write_bytes(dir.file("lab"), make_idx(kIdxLabelsMagic, {4}, pattern(4, 0)));
  try {
    read_idx_images_and_labels(dir.file("img"), dir.file("lab"));
    FAIL() << "mismatched counts were accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("5 images but 4 labels"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir.file("lab")), std::string::npos) << msg;
  }
}

TEST(Idx, MissingFileNamesThePackageAndTheCommand) {
  ScratchDir dir;
  const std::string path = dir.file("absent-images-idx3-ubyte.gz");
  const std::string msg = idx_error(path, kIdxImagesMagic);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tools/ddp demo"), std::string::npos) << msg;
  EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
}

// A generated Fashion-MNIST directory: file names, shapes, label type and the normalisation formula.
TEST(FashionMnist, LoadsAndNormalisesAGeneratedDirectory) {
  ScratchDir dir;
  const int n = 3;
  std::vector<uint8_t> pixels(n * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 7) % 256);
  pixels[0] = 0;
  pixels[1] = 255;
  const std::vector<uint8_t> labels{9, 0, 4};
  write_gzip_file(dir.file("t10k-images-idx3-ubyte.gz"), make_idx(kIdxImagesMagic, {n, 28, 28}, pixels));
  write_gzip_file(dir.file("t10k-labels-idx1-ubyte.gz"), make_idx(kIdxLabelsMagic, {n}, labels));

  FashionMnist d = load_fashion_mnist(dir.str(), Split::Test);
  EXPECT_EQ(d.images.shape(), (Shape{n, 1, 28, 28}));
  EXPECT_EQ(d.images.dtype(), DType::F32);
  EXPECT_EQ(d.labels.shape(), (Shape{n}));
  EXPECT_EQ(d.labels.dtype(), DType::I64);
  const float* img = d.images.data<float>();
  for (size_t i = 0; i < pixels.size(); ++i) {
    const double expected = (pixels[i] / 255.0 - 0.2860) / 0.3530;
    ASSERT_NEAR(img[i], expected, 1e-5) << "pixel " << i;
  }
  EXPECT_NEAR(img[0], -0.2860 / 0.3530, 1e-6);
  EXPECT_NEAR(img[1], (1.0 - 0.2860) / 0.3530, 1e-5);
  for (int i = 0; i < n; ++i) EXPECT_EQ(d.labels.data<int64_t>()[i], labels[static_cast<size_t>(i)]);

  // The train split reads other files, which are missing here.
  EXPECT_THROW(load_fashion_mnist(dir.str(), Split::Train), Error);
  auto ds = fashion_mnist_dataset(dir.str(), Split::Test);
  EXPECT_EQ(ds->size(), n);
}

TEST(FashionMnist, RefusesLabelsOutsideTheClassesAndWrongImageSize) {
  ScratchDir dir;
  write_bytes(dir.file("train-images-idx3-ubyte.gz"),
              make_idx(kIdxImagesMagic, {2, 28, 28}, pattern(2 * 784, 0)));
  write_bytes(dir.file("train-labels-idx1-ubyte.gz"), make_idx(kIdxLabelsMagic, {2}, {3, 10}));
  try {
    load_fashion_mnist(dir.str(), Split::Train);
    FAIL() << "label 10 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 10 of sample 1"), std::string::npos) << e.what();
  }
  write_bytes(dir.file("train-images-idx3-ubyte.gz"),
              make_idx(kIdxImagesMagic, {2, 27, 28}, pattern(2 * 756, 0)));
  write_bytes(dir.file("train-labels-idx1-ubyte.gz"), make_idx(kIdxLabelsMagic, {2}, {3, 1}));
  try {
    load_fashion_mnist(dir.str(), Split::Train);
    FAIL() << "27x28 images were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("27 x 28, expected 28 x 28"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_split("test"), Split::Test);
  EXPECT_THROW(parse_split("validation"), Error);
}

TEST(FashionMnist, ReadsTheInstalledTestSplit) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << kFashionMnistDir << " is not installed (Debian package dataset-fashion-mnist; "
                 << "`tools/ddp demo` or `apt-get install dataset-fashion-mnist` installs it)";
  FashionMnist d = load_fashion_mnist(kFashionMnistDir, Split::Test);
  ASSERT_EQ(d.images.shape(), (Shape{10000, 1, 28, 28}));
  ASSERT_EQ(d.labels.shape(), (Shape{10000}));
  std::map<int64_t, int> per_class;
  for (int64_t i = 0; i < 10000; ++i) {
    const int64_t l = d.labels.data<int64_t>()[i];
    ASSERT_TRUE(l >= 0 && l <= 9) << "label " << l << " at " << i;
    ++per_class[l];
  }
  EXPECT_EQ(per_class.size(), 10u);
  for (auto [label, count] : per_class)
    EXPECT_EQ(count, 1000) << "class " << label;  // the test set is balanced
  // The training-set statistics also fit the test split: mean near 0, standard deviation near 1.
  double sum = 0, sum_sq = 0;
  const float* img = d.images.data<float>();
  const int64_t total = d.images.numel();
  for (int64_t i = 0; i < total; ++i) sum += img[i], sum_sq += double(img[i]) * img[i];
  const double mean = sum / total, stddev = std::sqrt(sum_sq / total - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(stddev, 1.0, 0.05);
}

}  // namespace
}  // namespace ddp::data
