// test_safetensors_mutations.cpp - the CI stand-in for the libFuzzer harness
// (tests/fuzz/checkpoint_fuzz.cpp): thousands of seeded random mutations of a valid file go through the
// loader. Each must either load into a self-consistent result or raise ddp::Error naming the file; any other
// exception or a crash fails. Mutations aim at both layers: raw bytes (length field, truncation, noise) and
// the JSON text (digits and punctuation swapped so the header stays parseable and the field checks get
// exercised).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "checkpoint_test_util.h"
#include "runtime/checkpoint/safetensors.h"

using namespace ddp;
using namespace ddp::checkpoint;
using namespace ddp::checkpoint::testing;

namespace {

std::vector<uint8_t> valid_file() {
  static std::vector<float> w(24, 0.25f);
  static std::vector<double> d(3, -1.0);
  static std::vector<uint16_t> h(5, 0x3f80);
  static std::vector<int64_t> step(1, 42);
  static std::vector<uint8_t> mask(7, 1);
  return encode_safetensors({{"layer.weight", DType::F32, {4, 6}, w.data(), 96},
                             {"layer.bias", DType::F64, {3}, d.data(), 24},
                             {"emb", DType::BF16, {5}, h.data(), 10},
                             {"step", DType::I64, {}, step.data(), 8},
                             {"empty", DType::I32, {0, 3}, nullptr, 0},
                             {"mask", DType::U8, {7}, mask.data(), 7}},
                            {{"format", "pt"}, {"epoch", "3"}});
}

uint64_t header_length(const std::vector<uint8_t>& f) {
  uint64_t n = 0;
  for (int i = 7; i >= 0 && f.size() >= 8; --i) n = (n << 8) | f[static_cast<size_t>(i)];
  return n;
}

void set_header_length(std::vector<uint8_t>& f, uint64_t n) {
  for (int i = 0; i < 8 && static_cast<size_t>(i) < f.size(); ++i)
    f[static_cast<size_t>(i)] = uint8_t(n >> (8 * i));
}

// One random mutation of `f` (which starts as a valid file).
void mutate(std::vector<uint8_t>& f, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  const size_t header_end = std::min<size_t>(f.size(), 8 + header_length(f));
  static const std::string kJsonChars = "{}[]\",:-.0123456789eE ";
  switch (rng() % 11) {
    case 0:  // flip a few bits anywhere
      for (int i = 0, n = 1 + int(rng() % 4); i < n && !f.empty(); ++i)
        f[pick(f.size())] ^= uint8_t(1u << (rng() % 8));
      break;
    case 1:  // truncate
      f.resize(pick(f.size() + 1));
      break;
    case 2:  // a header byte becomes JSON punctuation or a digit
      if (header_end > 8) f[8 + pick(header_end - 8)] = uint8_t(kJsonChars[pick(kJsonChars.size())]);
      break;
    case 3:  // a digit in the header becomes another digit (JSON stays valid; offsets/shapes change)
    case 4: {
      std::vector<size_t> digits;
      for (size_t i = 8; i < header_end; ++i)
        if (f[i] >= '0' && f[i] <= '9') digits.push_back(i);
      if (!digits.empty()) f[digits[pick(digits.size())]] = uint8_t('0' + rng() % 10);
      break;
    }
    case 5:  // insert or erase a header byte, keeping or fixing the length field
      if (header_end > 8) {
        size_t at = 8 + pick(header_end - 8);
        if (rng() % 2)
          f.insert(f.begin() + static_cast<int64_t>(at), uint8_t(kJsonChars[pick(kJsonChars.size())]));
        else
          f.erase(f.begin() + static_cast<int64_t>(at));
        if (rng() % 2) set_header_length(f, header_end - 8 + (f.size() > header_end ? 1 : 0));
      }
      break;
    case 6: {  // lie about the header length: small nudge or anything
      uint64_t n = header_length(f);
      set_header_length(f, rng() % 2 ? n + static_cast<uint64_t>(int64_t(rng() % 17) - 8) : rng());
      break;
    }
    case 7:  // append garbage
      for (int i = 0, n = 1 + int(rng() % 16); i < n; ++i) f.push_back(uint8_t(rng()));
      break;
    case 8: {  // swap a '-' in for a digit, or a '.' (negative / fractional numbers)
      std::vector<size_t> digits;
      for (size_t i = 8; i < header_end; ++i)
        if (f[i] >= '0' && f[i] <= '9') digits.push_back(i);
      if (!digits.empty()) f[digits[pick(digits.size())]] = rng() % 2 ? '-' : '.';
      break;
    }
    case 9:  // structure-aware: edit one entry of the parsed header, re-encode it with a correct length
    case 10: {
      if (header_end != 8 + header_length(f) || header_end <= 8) break;
      auto header = nlohmann::ordered_json::parse(f.begin() + 8, f.begin() + static_cast<int64_t>(header_end),
                                                  nullptr, /*allow_exceptions=*/false);
      if (!header.is_object() || header.empty()) break;
      auto it = header.begin();
      std::advance(it, static_cast<int64_t>(pick(header.size())));
      auto& entry = it.value();
      if (!entry.is_object() || !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
          entry["data_offsets"].size() != 2 || !entry["data_offsets"][0].is_number_unsigned() ||
          !entry["data_offsets"][1].is_number_unsigned())
        break;
      auto& offsets = entry["data_offsets"];
      int64_t delta = int64_t(rng() % 9) - 4;
      uint64_t b = offsets[0].get<uint64_t>(), e = offsets[1].get<uint64_t>();
      switch (rng() % 5) {
        case 0:
          offsets = {b + static_cast<uint64_t>(delta), e + static_cast<uint64_t>(delta)};
          break;  // shift
        case 1:
          offsets = {b, e + static_cast<uint64_t>(delta)};
          break;
        case 2:
          entry["dtype"] =
              std::vector<std::string>{"F32", "F64", "BF16", "I32", "I64", "U8", "F16", ""}[pick(8)];
          break;
        case 3:
          entry["shape"].push_back(rng() % 3);
          break;
        case 4:
          header.erase(it);
          break;  // leaves a hole or a trailing region
      }
      std::string text = header.dump();
      text.append((8 - text.size() % 8) % 8, ' ');
      std::vector<uint8_t> out(8);
      out.insert(out.end(), text.begin(), text.end());
      out.insert(out.end(), f.begin() + static_cast<int64_t>(header_end), f.end());
      set_header_length(out, text.size());
      f = std::move(out);
      break;
    }
  }
}

// What a successful load must satisfy whatever the input was.
void expect_consistent(const SafetensorsContent& c, uint64_t file_size) {
  std::set<std::string> names;
  uint64_t total = 0;
  for (const NamedBuffer& t : c.tensors) {
    EXPECT_TRUE(names.insert(t.name).second) << "duplicate name " << t.name;
    uint64_t n = dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      EXPECT_GE(d, 0);
      n *= static_cast<uint64_t>(d);
    }
    EXPECT_EQ(n, t.bytes.size()) << t.name;
    total += t.bytes.size();
  }
  EXPECT_LE(total, file_size);
}

}  // namespace

TEST(SafetensorsMutations, ThousandsOfMutatedFilesLoadConsistentlyOrFailWithDdpError) {
  const std::vector<uint8_t> base = valid_file();
  ASSERT_NO_THROW(parse_safetensors(base.data(), base.size()));
  const uint64_t seed = 20261129;
  std::mt19937_64 rng(seed);
  int accepted = 0, rejected = 0;
  std::set<std::string> kinds_seen;
  const char* kinds[] = {"not valid JSON",
                         "is larger than the rest of the file",
                         "needs",
                         "past the end",
                         "overlaps",
                         "belong to no tensor",
                         "cover only",
                         "negative",
                         "fewer than the 8-byte"};
  for (int iter = 0; iter < 6000; ++iter) {
    std::vector<uint8_t> f = base;
    for (int m = 0, n = 1 + int(rng() % 3); m < n; ++m) mutate(f, rng);
    try {
      SafetensorsContent c = parse_safetensors(f.data(), f.size(), "mutant.safetensors");
      ++accepted;
      expect_consistent(c, f.size());
    } catch (const ddp::Error& e) {
      ++rejected;
      std::string msg = e.what();
      ASSERT_NE(msg.find("safetensors file 'mutant.safetensors'"), std::string::npos)
          << "seed " << seed << " iteration " << iter << ": " << msg;
      for (const char* k : kinds)
        if (msg.find(k) != std::string::npos) kinds_seen.insert(k);
    } catch (const std::exception& e) {
      FAIL() << "seed " << seed << " iteration " << iter << ": non-ddp exception " << e.what();
    }
  }
  // The mutations must reach past the first checks, or the test proves little.
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 3000);
  for (const char* k : kinds) EXPECT_TRUE(kinds_seen.count(k)) << "no mutation produced an error with: " << k;
}
