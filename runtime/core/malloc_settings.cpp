// malloc_settings.cpp - fixes glibc's mmap and trim thresholds when libddp is loaded (see malloc_settings.h).
#include "runtime/core/malloc_settings.h"

#include <cstdlib>
#include <cstring>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ddp {
namespace {

const char* g_state = "not applied";

bool user_tunes_malloc() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return true;
  const char* t = std::getenv("GLIBC_TUNABLES");
  return t &&
         (std::strstr(t, "glibc.malloc.mmap_threshold") || std::strstr(t, "glibc.malloc.trim_threshold"));
}

struct ApplyAtLoad {
  ApplyAtLoad() {
#if defined(__GLIBC__)
    if (user_tunes_malloc()) {
      g_state = "left to the user's environment (MALLOC_*_THRESHOLD_ or GLIBC_TUNABLES)";
      return;
    }
    const bool ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes)) == 1 &&
                    mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes)) == 1;
    g_state = ok ? "applied" : "refused by mallopt";
#else
    g_state = "not glibc";
#endif
  }
};
const ApplyAtLoad g_apply;

}  // namespace

const char* malloc_settings_state() { return g_state; }

}  // namespace ddp
