// test_safetensors_roundtrip.cpp - what we write reads back bit for bit (every dtype, scalars, empty
// tensors, metadata), and the bytes on disk follow the safetensors spec exactly (checked independently).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "checkpoint_test_util.h"
#include "runtime/checkpoint/safetensors.h"

using namespace ddp;
using namespace ddp::checkpoint;
using namespace ddp::checkpoint::testing;

namespace {

// Owns bytes for a view: element i holds a value derived from i and `seed`, so tensors differ.
struct OwnedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  TensorView view() const { return {name, dtype, shape, bytes.data(), bytes.size()}; }
};

template <class T>
void fill(std::vector<uint8_t>& bytes, int64_t n, int seed) {
  bytes.resize(static_cast<size_t>(n) * sizeof(T));
  for (int64_t i = 0; i < n; ++i) {
    T v;
    if constexpr (std::is_same_v<T, BFloat16>)
      v = BFloat16::from_float(0.5f * static_cast<float>(i) - static_cast<float>(seed));
    else if constexpr (std::is_floating_point_v<T>)
      v = static_cast<T>(std::sin(static_cast<double>(i + seed)) * 1e3);
    else
      v = static_cast<T>(i * 37 + seed * 11 - 5);
    std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
  }
}

OwnedTensor make(const std::string& name, DType dtype, std::vector<int64_t> shape, int seed) {
  OwnedTensor t{name, dtype, shape, {}};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  switch (dtype) {
    case DType::F32:
      fill<float>(t.bytes, n, seed);
      break;
    case DType::F64:
      fill<double>(t.bytes, n, seed);
      break;
    case DType::BF16:
      fill<BFloat16>(t.bytes, n, seed);
      break;
    case DType::I32:
      fill<int32_t>(t.bytes, n, seed);
      break;
    case DType::I64:
      fill<int64_t>(t.bytes, n, seed);
      break;
    case DType::U8:
      fill<uint8_t>(t.bytes, n, seed);
      break;
  }
  return t;
}

std::vector<OwnedTensor> all_kinds() {
  std::vector<OwnedTensor> ts;
  const DType dtypes[] = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8};
  int seed = 1;
  for (DType d : dtypes) {
    std::string code(safetensors_dtype_code(d));
    ts.push_back(make("matrix." + code, d, {3, 5}, seed++));
    ts.push_back(make("scalar." + code, d, {}, seed++));
    ts.push_back(make("empty." + code, d, {0}, seed++));
    ts.push_back(make("empty3d." + code, d, {4, 0, 2}, seed++));
    ts.push_back(make("vector." + code, d, {7}, seed++));
  }
  return ts;
}

std::vector<TensorView> views(const std::vector<OwnedTensor>& ts) {
  std::vector<TensorView> v;
  for (const auto& t : ts) v.push_back(t.view());
  return v;
}

}  // namespace

TEST(SafetensorsRoundTrip, EveryDtypeScalarAndEmptyTensorsComeBackBitForBit) {
  ScratchDir dir;
  auto tensors = all_kinds();
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "1200"}, {"note", "quote \" and \\"}};
  const std::string path = dir.file("all.safetensors");
  write_safetensors(path, views(tensors), meta);

  SafetensorsContent back = read_safetensors(path);
  EXPECT_EQ(back.metadata, meta);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const OwnedTensor& t : tensors) {
    const NamedBuffer* b = back.find(t.name);
    ASSERT_NE(b, nullptr) << t.name;
    EXPECT_EQ(b->dtype, t.dtype) << t.name;
    EXPECT_EQ(b->shape, t.shape) << t.name;
    EXPECT_EQ(b->bytes, t.bytes) << t.name;
  }
  const NamedBuffer* scalar = back.find("scalar.F64");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(scalar->bytes.size(), 8u);
  EXPECT_EQ(back.find("empty3d.I32")->numel(), 0);
  EXPECT_EQ(back.find("missing"), nullptr);

  // The file and the in-memory encoding are the same bytes, and parse the same way.
  EXPECT_EQ(read_raw(path), encode_safetensors(views(tensors), meta));
}

TEST(SafetensorsRoundTrip, EmptyCheckpointHasNoTensorsAndNoMetadata) {
  ScratchDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_safetensors(path, {}, {});
  auto raw = read_raw(path);
  ASSERT_EQ(raw.size(), 16u);  // 8-byte length + "{}" padded to 8
  EXPECT_EQ(std::string(raw.begin() + 8, raw.end()), "{}      ");
  SafetensorsContent back = read_safetensors(path);
  EXPECT_TRUE(back.tensors.empty());
  EXPECT_TRUE(back.metadata.empty());
}

TEST(SafetensorsRoundTrip, ExactBytesOfASmallFileMatchTheSpec) {
  // Hand-derived: metadata first, tensors ordered by element size (F32 before U8), compact JSON, header
  // padded with spaces to a multiple of 8, then the raw little-endian data.
  float a[2] = {1.0f, -2.0f};
  uint8_t b[3] = {7, 8, 9};
  std::vector<TensorView> ts = {{"b", DType::U8, {3}, b, 3}, {"a", DType::F32, {2}, a, 8}};
  auto bytes = encode_safetensors(ts, {{"format", "pt"}});
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  ASSERT_EQ(padded.size() % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + padded.size() + 11);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  EXPECT_EQ(n, padded.size());
  EXPECT_EQ(std::string(bytes.begin() + 8, bytes.begin() + 8 + padded.size()), padded);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + padded.size(), a, 8), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + padded.size() + 8, b, 3), 0);
}

TEST(SafetensorsRoundTrip, WrittenFileFollowsTheSpecCheckedIndependently) {
  // Re-derive everything from the raw bytes with a plain JSON parser, not with our reader.
  auto tensors = all_kinds();
  auto bytes = encode_safetensors(views(tensors), {{"k", "v"}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  ASSERT_EQ(n % 8, 0u) << "header length must be padded to a multiple of 8";
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
  size_t close = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces only";
  auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"]["k"], "v");
  const uint64_t data_start = 8 + n;
  uint64_t data_bytes = bytes.size() - data_start;

  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const OwnedTensor& t : tensors) {
    ASSERT_TRUE(j.contains(t.name)) << t.name;
    const auto& e = j[t.name];
    EXPECT_EQ(e["dtype"], std::string(safetensors_dtype_code(t.dtype)));
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.shape);
    uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    ASSERT_EQ(end - begin, t.bytes.size()) << t.name;
    EXPECT_EQ(begin % dtype_size(t.dtype), 0u) << t.name << " is not aligned to its element size";
    EXPECT_TRUE(
        std::equal(t.bytes.begin(), t.bytes.end(), bytes.begin() + static_cast<int64_t>(data_start + begin)))
        << t.name;
    spans.push_back({begin, end});
  }
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (auto [b, e] : spans) {
    EXPECT_EQ(b, covered);
    covered = e;
  }
  EXPECT_EQ(covered, data_bytes);
}

TEST(SafetensorsRoundTrip, OverwritingReplacesTheWholeFile) {
  ScratchDir dir;
  const std::string path = dir.file("m.safetensors");
  auto first = make("w", DType::F32, {100}, 1);
  auto second = make("w", DType::F32, {3}, 2);
  write_safetensors(path, {first.view()});
  write_safetensors(path, {second.view()}, {{"epoch", "2"}});
  auto back = read_safetensors(path);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].bytes, second.bytes);
  EXPECT_EQ(back.metadata.at("epoch"), "2");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST(SafetensorsWrite, BadInputsAreRejectedWithTheTensorNamed) {
  float x[4] = {};
  auto error_of = [](const std::vector<TensorView>& ts) -> std::string {
    try {
      encode_safetensors(ts);
    } catch (const ddp::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of({{"w", DType::F32, {3}, x, 16}}).find("'w'"), std::string::npos);
  EXPECT_NE(error_of({{"w", DType::F32, {3}, x, 16}}).find("need 12 bytes but the view has 16"),
            std::string::npos);
  EXPECT_NE(error_of({{"w", DType::F32, {-1, 4}, x, 16}}).find("negative dimension -1"), std::string::npos);
  EXPECT_NE(
      error_of({{"w", DType::F32, {4}, x, 16}, {"w", DType::F32, {4}, x, 16}}).find("two tensors named 'w'"),
      std::string::npos);
  EXPECT_NE(error_of({{"__metadata__", DType::F32, {4}, x, 16}}).find("reserved"), std::string::npos);
  EXPECT_NE(error_of({{"w", DType::F32, {4}, nullptr, 16}}).find("data is null"), std::string::npos);
  EXPECT_NE(error_of({{"w", DType::F32, {1LL << 40, 1LL << 40}, x, 16}}).find("overflows"),
            std::string::npos);
  EXPECT_NE(error_of({{"bad\xff", DType::F32, {4}, x, 16}}).find("UTF-8"), std::string::npos);
}
