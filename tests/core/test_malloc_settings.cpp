// test_malloc_settings.cpp - libddp fixes glibc's mmap and trim thresholds at load, so the temporaries of a
// step (blocks the size of OpenBLAS's per-call sgemm buffer) are taken from the heap again, not faulted in
// anew.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/core/malloc_settings.h"

namespace ddp {
namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizer = true;
#else
constexpr bool kSanitizer = false;
#endif

TEST(MallocSettings, AppliedAtLoad) {
  if (kSanitizer) GTEST_SKIP() << "sanitizers replace malloc";
  EXPECT_STREQ(malloc_settings_state(), "applied");
}

TEST(MallocSettings, BuffersOfAStepFreedAndTakenAgainMakeNoNewPageFaults) {
  if (kSanitizer) GTEST_SKIP() << "sanitizers replace malloc";
  if (std::string(malloc_settings_state()) != "applied") GTEST_SKIP() << malloc_settings_state();
  // A step's temporaries: 16 blocks the size of OpenBLAS 0.3.21's per-call sgemm buffer, taken, touched,
  // freed. glibc's defaults map each block afresh (threshold 128 KiB) or, once the threshold has risen,
  // give the 8 MiB back to the system at the last free (trim threshold) - either way every step faults
  // thousands of pages in again.
  constexpr size_t kBytes = 512 << 10;
  constexpr int kBlocks = 16;
  auto step = [] {
    char* p[kBlocks];
    for (auto& b : p) {
      b = static_cast<char*>(std::malloc(kBytes));
      ASSERT_NE(b, nullptr);
      for (size_t i = 0; i < kBytes; i += 4096) b[i] = static_cast<char>(i);
      asm volatile("" : : "r"(b) : "memory");
    }
    for (auto& b : p) std::free(b);
  };
  step();
  step();  // warm-up: the heap grows to its size
  const long before = minor_faults();
  for (int i = 0; i < 10; ++i) step();
  EXPECT_LT(minor_faults() - before, 500)
      << "10 steps of 16 x 512 KiB faulted pages in again (glibc defaults: "
         "about 20000)";
}

}  // namespace
}  // namespace ddp
