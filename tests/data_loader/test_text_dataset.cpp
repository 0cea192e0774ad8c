// test_text_dataset.cpp - text normalisation (BOM, CRLF), the train/val split, the window definition
// (x and the one-step-shifted y), and errors for too-short texts and missing files.
#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/core/error.h"
#include "runtime/data/dataset_files.h"
#include "runtime/data/text_dataset.h"
#include "tests/data_loader/scratch_dir.h"

namespace ddp::data {
namespace {

using testing::ScratchDir;
using testing::write_bytes;

std::vector<uint8_t> as_bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(TextDataset, NormalizeDropsBomAndTurnsCrlfIntoLf) {
  EXPECT_EQ(normalize_text("\xEF\xBB\xBFHello\r\nworld\r\n"), "Hello\nworld\n");
  EXPECT_EQ(normalize_text("a\rb\r\r\nc"), "a\rb\r\nc");  // a lone CR stays; only the CR of CR LF goes
  EXPECT_EQ(normalize_text("x\xEF\xBB\xBFy"), "x\xEF\xBB\xBFy");  // a BOM-like sequence inside is text
  EXPECT_EQ(normalize_text("\xEF\xBB"), "\xEF\xBB");              // too short to be a BOM
  EXPECT_EQ(normalize_text(""), "");
  EXPECT_EQ(normalize_text("\r"), "\r");
}

TEST(TextDataset, ReadsFileAsNormalisedBytes) {
  ScratchDir dir;
  write_bytes(dir.file("t.txt"), as_bytes("\xEF\xBB\xBF"
                                          "Call me Ishmael.\r\nSome years ago\r\n"));
  EXPECT_EQ(read_text_file(dir.file("t.txt")), "Call me Ishmael.\nSome years ago\n");
}

TEST(TextDataset, SplitKeepsTheLastTenPercentForValidation) {
  std::string text(1000, 'a');
  for (size_t i = 900; i < 1000; ++i) text[i] = 'b';
  TextSplit s = split_train_val(text);
  EXPECT_EQ(s.train, std::string(900, 'a'));
  EXPECT_EQ(s.val, std::string(100, 'b'));
  TextSplit odd = split_train_val(std::string(15, 'z'), 0.25);  // floor(3.75) = 3 val bytes
  EXPECT_EQ(odd.train.size(), 12u);
  EXPECT_EQ(odd.val.size(), 3u);
  EXPECT_EQ(split_train_val("abc", 0.0).val, "");
  EXPECT_THROW(split_train_val("abc", 1.0), Error);
  EXPECT_THROW(split_train_val("abc", -0.1), Error);
}

TEST(TextDataset, WindowsAreStrideTAndTargetsShiftByOne) {
  std::string text;
  for (int i = 0; i < 23; ++i) text.push_back(static_cast<char>('A' + i));  // "ABC...W", 23 bytes
  const int64_t t = 5;
  auto ds = TokenWindowDataset::from_text(text, t);
  EXPECT_EQ(ds->size(), (23 - 1) / t);  // 4 windows: starts 0, 5, 10, 15; the last target is byte 20
  EXPECT_EQ(ds->vocab_size(), 256);
  const std::vector<int64_t> idx{3, 0, 3};
  DatasetBatch b = ds->get_batch(idx);
  ASSERT_EQ(b.x.shape(), (Shape{3, t}));
  ASSERT_EQ(b.y.shape(), (Shape{3, t}));
  ASSERT_EQ(b.x.dtype(), DType::I64);
  for (int64_t r = 0; r < 3; ++r) {
    const int64_t start = idx[static_cast<size_t>(r)] * t;
    for (int64_t j = 0; j < t; ++j) {
      EXPECT_EQ(b.x.data<int64_t>()[r * t + j], text[static_cast<size_t>(start + j)]) << r << "," << j;
      EXPECT_EQ(b.y.data<int64_t>()[r * t + j], text[static_cast<size_t>(start + j + 1)]) << r << "," << j;
    }
  }
  EXPECT_THROW(ds->get_batch(std::vector<int64_t>{4}), Error);
  EXPECT_THROW(ds->get_batch(std::vector<int64_t>{-1}), Error);
}

TEST(TextDataset, ExactFitAndBytesAboveAscii) {
  // len = T + 1 gives exactly one window; bytes >= 128 are tokens 128..255, not negative chars.
  std::string text = "\xC3\xA9t\xC3\xA9!";  // "été!" in UTF-8, 6 bytes
  auto ds = TokenWindowDataset::from_text(text, 5);
  ASSERT_EQ(ds->size(), 1);
  DatasetBatch b = ds->get_batch(std::vector<int64_t>{0});
  EXPECT_EQ(b.x.data<int64_t>()[0], 0xC3);
  EXPECT_EQ(b.y.data<int64_t>()[4], '!');
  try {
    TokenWindowDataset::from_text("abcde", 5);
    FAIL() << "a 5-byte text made a window of 5";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("need block_size + 1 = 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TokenWindowDataset({0, 1, 7}, 1, 5), Error);  // token 7 outside vocab 5
}

TEST(TextDataset, LoadsTrainAndValidationFromAFile) {
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + i % 26);
  write_bytes(dir.file("book.txt"), as_bytes(text));
  TextDatasets d = load_text_datasets(dir.file("book.txt"), 8, 0.1);
  EXPECT_EQ(d.train->num_tokens(), 180);
  EXPECT_EQ(d.val->num_tokens(), 20);
  EXPECT_EQ(d.train->size(), (180 - 1) / 8);
  EXPECT_EQ(d.val->size(), (20 - 1) / 8);
  // The validation set starts right where the training text ends.
  EXPECT_EQ(d.val->get_batch(std::vector<int64_t>{0}).x.data<int64_t>()[0], text[180]);
}

// The packaged location names the package; a path of the user's own (train --data-path) is a wrong path.
TEST(TextDataset, MissingMobyDickNamesThePackageOnlyAtItsPackagedPath) {
  ScratchDir dir;
  const std::string path = dir.file("mobydick.txt");
  try {
    load_text_datasets(path, 64, 0.1, kMobyDickPackage);
    FAIL() << "a missing file was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("apt-get install golang-github-colinmarc-hdfs-dev"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tools/ddp demo"), std::string::npos) << msg;
  }
  try {
    load_moby_dick(64, path);
    FAIL() << "a missing file was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("data file '" + path + "' does not exist; check the path"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("apt-get"), std::string::npos) << msg;
  }
  EXPECT_EQ(package_if_packaged_path(kMobyDickPath, kMobyDickPath, "p"), "p");
  EXPECT_EQ(package_if_packaged_path("/usr/share/./datasets/fashion-mnist/",
                                     "/usr/share/datasets/fashion-mnist", "p"),
            "p");
  EXPECT_EQ(package_if_packaged_path("/usr/share/datasets/fashion-mnist2",
                                     "/usr/share/datasets/fashion-mnist", "p"),
            "");
  EXPECT_EQ(package_if_packaged_path("", "/usr/share/datasets/fashion-mnist", "p"), "");
}

TEST(TextDataset, ReadsInstalledMobyDick) {
  if (!std::filesystem::exists(kMobyDickPath))
    GTEST_SKIP() << kMobyDickPath << " is not installed (Debian package " << kMobyDickPackage << ")";
  const std::string text = read_text_file(kMobyDickPath, kMobyDickPackage);
  EXPECT_EQ(text.find('\r'), std::string::npos) << "CRLF left in the text";
  EXPECT_NE(static_cast<uint8_t>(text[0]), 0xEF) << "BOM left in the text";
  EXPECT_NE(text.find("Call me Ishmael."), std::string::npos);
  TextDatasets d = load_moby_dick(128);
  EXPECT_EQ(d.train->num_tokens() + d.val->num_tokens(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(d.train->size(), (d.train->num_tokens() - 1) / 128);
}

}  // namespace
}  // namespace ddp::data
