// mutations.h - a seeded corpus of damaged files made from one valid file: truncations, bit flips, random
// byte runs and - when the file is (or holds) JSON - every value replaced by hostile numbers (2000000000,
// 2^62, -1, the int64 and uint64 limits, 1e300) and by values of the wrong type. The same seed gives the same
// corpus on every machine, so a failure names a case that reproduces. Used by test_reader_fuzz.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddp::testing::fuzz {

struct Mutation {
  std::string what;   // "truncated to 17 bytes", "/entries/0/count = 2000000000", ...
  std::string bytes;  // the damaged file
};

// The JSON inside a file and how to put an edited one back (a safetensors header: its length prefix and
// data).
struct JsonPart {
  nlohmann::ordered_json doc;
  std::function<std::string(const std::string& json_text)> wrap;
};

inline std::vector<nlohmann::ordered_json> hostile_values() {
  using J = nlohmann::ordered_json;
  return {J(2000000000), J(int64_t{1} << 62),
          J(-1),         J(INT64_MAX),
          J(INT64_MIN),  J(UINT64_MAX),
          J(1e300),      J(-0.5),
          J("x"),        J(true),
          J(nullptr),    J::array(),
          J::object(),   J::array({J::array({J::array({1})})})};
}

// Every value's JSON pointer, containers included, in document order - of an array only its first and last
// element (the others repeat their fields) - at most `limit`, evenly spread.
inline std::vector<std::string> value_paths(const nlohmann::ordered_json& doc, size_t limit) {
  std::vector<std::string> all;
  std::function<void(const nlohmann::ordered_json&, const std::string&)> walk = [&](const auto& j,
                                                                                    const std::string& at) {
    if (!at.empty()) all.push_back(at);
    if (j.is_object())
      for (auto it = j.begin(); it != j.end(); ++it) walk(it.value(), at + "/" + it.key());
    else if (j.is_array())
      for (size_t i = 0; i < j.size(); i = (i + 1 < j.size() && i == 0) ? j.size() - 1 : j.size())
        walk(j[i], at + "/" + std::to_string(i));
  };
  walk(doc, "");
  if (all.size() <= limit) return all;
  std::vector<std::string> out;
  for (size_t i = 0; i < limit; ++i) out.push_back(all[i * all.size() / limit]);
  return out;
}

// The corpus of one valid file. `json`: the JSON it holds (nullptr: none); `json_paths` caps how many of its
// values are replaced (each by every hostile value).
inline std::vector<Mutation> corpus(const std::string& valid, uint32_t seed, const JsonPart* json = nullptr,
                                    size_t json_paths = 120) {
  std::vector<Mutation> out;
  std::mt19937 rng(seed);
  const size_t n = valid.size();
  // Truncations: every length up to 16, 24 spread over the rest, and one or two bytes short.
  std::vector<size_t> cuts;
  for (size_t k = 0; k <= 16 && k < n; ++k) cuts.push_back(k);
  for (size_t i = 1; i <= 24; ++i) cuts.push_back(n * i / 25);
  if (n >= 2) cuts.push_back(n - 2);
  if (n >= 1) cuts.push_back(n - 1);
  for (size_t k : cuts) out.push_back({"truncated to " + std::to_string(k) + " bytes", valid.substr(0, k)});
  if (n == 0) return out;
  std::uniform_int_distribution<size_t> at(0, n - 1);
  std::uniform_int_distribution<int> bit(0, 7), byte(0, 255), run(1, 8);
  // Single bit flips.
  for (int i = 0; i < 150; ++i) {
    std::string b = valid;
    const size_t k = at(rng);
    const int which = bit(rng);
    b[k] = static_cast<char>(b[k] ^ (1 << which));
    out.push_back({"bit " + std::to_string(which) + " of byte " + std::to_string(k) + " flipped", b});
  }
  // Runs of random bytes.
  for (int i = 0; i < 50; ++i) {
    std::string b = valid;
    const size_t k = at(rng);
    const int len = run(rng);
    for (int j = 0; j < len && k + j < n; ++j) b[k + j] = static_cast<char>(byte(rng));
    out.push_back({std::to_string(len) + " random bytes at " + std::to_string(k), b});
  }
  if (json == nullptr) return out;
  for (const std::string& path : value_paths(json->doc, json_paths)) {
    for (const auto& v : hostile_values()) {
      nlohmann::ordered_json d = json->doc;
      d[nlohmann::ordered_json::json_pointer(path)] = v;
      out.push_back({path + " = " + v.dump(), json->wrap(d.dump())});
    }
  }
  return out;
}

}  // namespace ddp::testing::fuzz
