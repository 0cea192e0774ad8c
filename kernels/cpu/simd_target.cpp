// simd_target.cpp - reports the instruction set HWY_DYNAMIC_DISPATCH selects, through the same dispatch
// mechanism the kernels use (so a test that forces a target can see that it took effect), and applies the
// DDP_CPU_ISA cap when the library is loaded (hwy::DisableTargets, before any kernel is dispatched).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/simd_target.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"

#include "kernels/cpu/simd_target.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
int64_t CompiledTarget() { return HWY_TARGET; }
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace ddp::kernels::cpu {
HWY_EXPORT(CompiledTarget);
int64_t simd_target() { return HWY_DYNAMIC_DISPATCH(CompiledTarget)(); }
const char* simd_target_name() { return hwy::TargetName(simd_target()); }

int64_t simd_targets_above(const std::string& isa) {
  std::string v = isa;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v.empty() || v == "best") return 0;
  int64_t cap = 0;  // the best target allowed; Highway's better targets have the lower bits
  if (v == "avx3" || v == "avx512")
    cap = HWY_AVX3;
  else if (v == "avx2")
    cap = HWY_AVX2;
  else if (v == "sse4")
    cap = HWY_SSE4;
  else if (v == "ssse3")
    cap = HWY_SSSE3;
  else
    throw std::invalid_argument(
        "DDP_CPU_ISA='" + isa +
        "' is not an instruction set ddp.cpp's CPU kernels know: use avx3 (or avx512), "
        "avx2, sse4 or ssse3 to cap the kernels' instruction set, or unset it to let "
        "the CPU choose");
  return cap - 1;  // every target bit below the cap's
}

namespace {
std::string g_isa_cap_error;  // set (before kIsaCap below) when DDP_CPU_ISA's value is unknown

// Read once, when the library is loaded: the cap holds for every kernel the process dispatches. An unknown
// value is not applied and not fatal here (the library may be loaded into a Python session that must not die
// on import): it is printed, kept for simd_isa_cap_error(), and programs that report the ISA refuse to run.
std::string apply_isa_cap_from_env() {
  const char* env = std::getenv("DDP_CPU_ISA");
  const std::string isa = env ? env : "";
  try {
    const int64_t above = simd_targets_above(isa);
    if (above != 0) hwy::DisableTargets(above);
    // oneDNN (the GEMM library picked for some products) reads its own cap at its first use, after this;
    // OpenBLAS picks its kernels when it is loaded, before this runs: OPENBLAS_CORETYPE is the caller's to
    // set.
    if (above & HWY_AVX3) ::setenv("ONEDNN_MAX_CPU_ISA", (above & HWY_AVX2) ? "SSE41" : "AVX2", 0);
  } catch (const std::invalid_argument& e) {
    g_isa_cap_error = e.what();
    std::fprintf(stderr, "ddp.cpp: warning: %s; no cap applied\n", e.what());
    return "";
  }
  return isa;
}
const std::string kIsaCap = apply_isa_cap_from_env();
}  // namespace

const std::string& simd_isa_cap() { return kIsaCap; }
const std::string& simd_isa_cap_error() { return g_isa_cap_error; }
bool simd_isa_cap_below_avx512() { return (simd_targets_above(kIsaCap) & HWY_AVX3) != 0; }
}  // namespace ddp::kernels::cpu
#endif
