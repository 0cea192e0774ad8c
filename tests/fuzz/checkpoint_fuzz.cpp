// checkpoint_fuzz.cpp - libFuzzer harness for the safetensors loader: any input must either load into a
// self-consistent result or raise ddp::Error with a bounded message. Not part of the CMake build
// (tests/CMakeLists.txt skips fuzz/); CI runs the seeded mutation test
// tests/checkpoint/test_safetensors_mutations.cpp instead.
//
// Build and run (from the repository root; clang with libFuzzer, ASan and UBSan):
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. \
//     tests/fuzz/checkpoint_fuzz.cpp runtime/checkpoint/safetensors.cpp \
//     runtime/checkpoint/safetensors_header.cpp runtime/checkpoint/atomic_file.cpp \
//     -o /tmp/checkpoint_fuzz
//   mkdir -p /tmp/ckpt_corpus && /tmp/checkpoint_fuzz /tmp/ckpt_corpus -max_len=4096 -max_total_time=60
//
// An empty corpus directory is seeded with one valid checkpoint (see LLVMFuzzerInitialize).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/error.h"

namespace {

// A valid file with every dtype, a scalar, an empty tensor and metadata: the mutator's starting point.
std::vector<uint8_t> seed_file() {
  static float w[6] = {1, 2, 3, 4, 5, 6};
  static double d[2] = {0.5, -0.5};
  static uint16_t h[3] = {0x3f80, 0, 0xbf80};
  static int32_t i32[2] = {7, -7};
  static int64_t step = 42;
  static uint8_t mask[5] = {1, 0, 1, 0, 1};
  using ddp::DType;
  return ddp::checkpoint::encode_safetensors({{"w", DType::F32, {2, 3}, w, sizeof w},
                                              {"d", DType::F64, {2}, d, sizeof d},
                                              {"h", DType::BF16, {3}, h, sizeof h},
                                              {"i", DType::I32, {2}, i32, sizeof i32},
                                              {"step", DType::I64, {}, &step, 8},
                                              {"empty", DType::F32, {0, 4}, nullptr, 0},
                                              {"mask", DType::U8, {5}, mask, 5}},
                                             {{"format", "pt"}});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto content = ddp::checkpoint::parse_safetensors(data, size, "fuzz");
    std::set<std::string> names;
    uint64_t total = 0;
    for (const auto& t : content.tensors) {
      if (!names.insert(t.name).second) std::abort();  // duplicate name accepted
      uint64_t n = ddp::dtype_size(t.dtype);
      for (int64_t dim : t.shape) {
        if (dim < 0) std::abort();
        n *= static_cast<uint64_t>(dim);
      }
      if (n != t.bytes.size()) std::abort();  // shape and bytes disagree
      total += n;
    }
    if (total > size) std::abort();
  } catch (const ddp::Error& e) {
    // Rejected with a message: fine, as long as the message quotes only an excerpt of the input (a hostile
    // header must not be able to make the error itself huge; excerpts are at most 80 characters).
    if (std::strlen(e.what()) > 1024) std::abort();
  }
  return 0;
}

// Seeds the corpus: when the first non-flag argument is an empty directory, a valid file is written into
// it (libFuzzer reads the corpus after this hook), so mutations start from a well-formed checkpoint.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const std::vector<uint8_t> seed = seed_file();
  LLVMFuzzerTestOneInput(seed.data(), seed.size());  // a broken encoder fails loudly at start-up
  for (int i = 1; i < *argc; ++i) {
    const char* arg = (*argv)[i];
    if (arg[0] == '-') continue;
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec) && std::filesystem::is_empty(arg, ec)) {
      std::ofstream out(std::filesystem::path(arg) / "seed.safetensors", std::ios::binary);
      out.write(reinterpret_cast<const char*>(seed.data()), static_cast<std::streamsize>(seed.size()));
    }
    break;
  }
  return 0;
}
