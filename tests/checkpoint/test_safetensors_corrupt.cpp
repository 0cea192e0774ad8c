// test_safetensors_corrupt.cpp - every way a safetensors file can be wrong gives a ddp::Error that names the
// file and the exact problem; nothing crashes, nothing returns garbage, lying lengths allocate nothing big.
#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint_test_util.h"
#include "runtime/checkpoint/safetensors.h"

using namespace ddp;
using namespace ddp::checkpoint;
using namespace ddp::checkpoint::testing;

namespace {

// Two tensors: a (F32 [2], bytes 0..8) and b (U8 [3], bytes 8..11). `a_entry` / `b_entry` replace them.
std::string header_with(const std::string& a_entry = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})",
                        const std::string& b_entry = R"({"dtype":"U8","shape":[3],"data_offsets":[8,11]})") {
  return R"({"a":)" + a_entry + R"(,"b":)" + b_entry + "}";
}

// Asserts that `bytes` are rejected with a message naming the file and containing `expected`.
void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& expected) {
  std::string msg = parse_error(bytes);
  ASSERT_FALSE(msg.empty()) << "accepted, but expected an error containing: " << expected;
  EXPECT_NE(msg.find("safetensors file 'case.safetensors'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(expected), std::string::npos)
      << "message: " << msg << "\nexpected to contain: " << expected;
}

}  // namespace

TEST(SafetensorsCorrupt, TheUncorruptedBaseParses) {
  auto content = parse_safetensors(raw_safetensors(header_with(), 11).data(), 8 + header_with().size() + 11);
  ASSERT_EQ(content.tensors.size(), 2u);
  EXPECT_EQ(content.tensors[1].bytes, (std::vector<uint8_t>{8, 9, 10}));
}

TEST(SafetensorsCorrupt, FileShorterThanTheLengthField) {
  expect_rejected({}, "the file has 0 bytes, fewer than the 8-byte header length");
  expect_rejected({1, 2, 3}, "the file has 3 bytes");
}

TEST(SafetensorsCorrupt, HeaderLengthLargerThanTheFileAllocatesNothing) {
  auto bytes = raw_safetensors(header_with(), 11, /*declared_length=*/int64_t{1} << 62);
  expect_rejected(bytes, "the header length 4611686018427387904 is larger than the rest of the file");
  expect_rejected(raw_safetensors(header_with(), 0, header_with().size() + 1),
                  "is larger than the rest of the file");
  expect_rejected(raw_safetensors("", 16, 0), "the header length is 0");
}

TEST(SafetensorsCorrupt, InvalidJson) {
  expect_rejected(raw_safetensors(R"({"a":{"dtype":"F32",)", 0), "the header is not valid JSON");
  expect_rejected(raw_safetensors("[1, 2]  ", 0), "does not start with '{'");
  expect_rejected(raw_safetensors(std::string("{}\0\0\0\0\0\0", 8), 0), "not valid JSON");
}

TEST(SafetensorsCorrupt, UnknownDtype) {
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F16","shape":[4],"data_offsets":[0,8]})"), 11),
                  "tensor 'a' has dtype \"F16\", which ddp.cpp does not support");
  expect_rejected(raw_safetensors(header_with(R"({"dtype":3,"shape":[2],"data_offsets":[0,8]})"), 11),
                  "tensor 'a' has a dtype that is not a string");
}

TEST(SafetensorsCorrupt, ShapeTimesDtypeSizeDiffersFromOffsets) {
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), 11),
                  "tensor 'a' of dtype F32 and shape [3] needs 12 bytes but its data_offsets [0, 8] span 8");
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F64","shape":[2],"data_offsets":[0,8]})"), 11),
                  "needs 16 bytes");
  expect_rejected(
      raw_safetensors(header_with(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
                      11),
      "whose byte size overflows 64 bits");
}

TEST(SafetensorsCorrupt, OffsetsOutOfRange) {
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})",
                                              R"({"dtype":"U8","shape":[5],"data_offsets":[8,13]})"),
                                  11),
                  "tensor 'b' has data_offsets [8, 13] past the end of the data section (11 bytes)");
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), 11),
                  "tensor 'a' has data_offsets [8, 0] with begin after end");
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), 11),
                  "tensor 'a' has a negative data offset -8");
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[2],"data_offsets":[0.5,8]})"), 11),
                  "data offset that is not an integer: 0.5");
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,9]})"), 11),
                  "tensor 'a' needs data_offsets [begin, end], got [0,8,9]");
}

TEST(SafetensorsCorrupt, OverlappingOffsets) {
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})",
                                              R"({"dtype":"U8","shape":[3],"data_offsets":[6,9]})"),
                                  9),
                  "tensor 'b' at [6, 9) overlaps tensor 'a' at [0, 8)");
}

TEST(SafetensorsCorrupt, OffsetsNotCoveringTheDataSection) {
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})",
                                              R"({"dtype":"U8","shape":[3],"data_offsets":[9,12]})"),
                                  12),
                  "bytes [8, 9) of the data section belong to no tensor (gap before 'b')");
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[2],"data_offsets":[1,9]})",
                                              R"({"dtype":"U8","shape":[3],"data_offsets":[9,12]})"),
                                  12),
                  "bytes [0, 1) of the data section belong to no tensor (gap before 'a')");
  expect_rejected(raw_safetensors(header_with(), 20),
                  "the data section has 20 bytes but the tensors cover only 11");
}

TEST(SafetensorsCorrupt, NegativeOrNonIntegerDimensions) {
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[-2,-1],"data_offsets":[0,8]})"), 11),
                  "tensor 'a' has a negative dimension -2 in shape [-2,-1]");
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), 11),
                  "tensor 'a' has a dimension that is not an integer: 2.0");
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), 11),
                  "tensor 'a' has a shape that is not an array: 2");
}

TEST(SafetensorsCorrupt, DuplicateNamesAndKeys) {
  std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("a":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  expect_rejected(raw_safetensors(h, 11), "the header names 'a' twice");
  expect_rejected(
      raw_safetensors(header_with(R"({"dtype":"F32","shape":[2],"shape":[8],"data_offsets":[0,8]})"), 11),
      "the header names 'shape' twice");
}

TEST(SafetensorsCorrupt, MissingOrUnknownFieldsAndBadMetadata) {
  expect_rejected(raw_safetensors(header_with(R"({"dtype":"F32","data_offsets":[0,8]})"), 11),
                  "tensor 'a' has no \"shape\" field");
  expect_rejected(
      raw_safetensors(header_with(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"stride":[1]})"), 11),
      "tensor 'a' has an unknown field 'stride'");
  expect_rejected(raw_safetensors(header_with("[1]"), 11), "entry 'a' must be an object");
  expect_rejected(raw_safetensors(R"({"__metadata__":{"step":12}})", 0),
                  "metadata value of 'step' must be a string, got number (12)");
  expect_rejected(raw_safetensors(R"({"__metadata__":[1]})", 0),
                  "\"__metadata__\" must be an object of strings");
}

TEST(SafetensorsCorrupt, TruncatedFileOnDisk) {
  ScratchDir dir;
  const std::string path = dir.file("cut.safetensors");
  std::vector<float> w(1000, 1.5f);
  write_safetensors(path, {{"w", DType::F32, {1000}, w.data(), 4000}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  try {
    read_safetensors(path);
    FAIL() << "a truncated file was accepted";
  } catch (const ddp::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("safetensors file '" + path + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor 'w' has data_offsets [0, 4000] past the end of the data section (3900 bytes)"),
              std::string::npos)
        << msg;
  }
  // Cut inside the header.
  std::filesystem::resize_file(path, 20);
  try {
    read_safetensors(path);
    FAIL() << "a file cut inside its header was accepted";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is larger than the rest of the file (12 bytes)"), std::string::npos)
        << e.what();
  }
}

TEST(SafetensorsCorrupt, MissingFileAndDirectory) {
  ScratchDir dir;
  try {
    read_safetensors(dir.file("nope.safetensors"));
    FAIL();
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.safetensors': cannot open: No such file"), std::string::npos)
        << e.what();
  }
  try {
    read_safetensors(dir.path());
    FAIL();
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}
