// gemm_backend.cpp - the GEMM library setting (DDP_GEMM, set_gemm_backend) and the per-shape rule of
// gemm_backend.h.
#include "kernels/cpu/gemm_backend.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "kernels/cpu/gemm_blis.h"
#include "runtime/core/error.h"

#ifdef DDP_WITH_ONEDNN
#include "kernels/cpu/gemm_onednn.h"
#endif

namespace ddp::kernels::cpu {
namespace {
void check_available(GemmBackend backend, std::string_view what) {
  DDP_CHECK(backend != GemmBackend::OneDNN || onednn_available(), what,
            " asks for oneDNN, but this build has no oneDNN: install libdnnl-dev (tools/ddp build does) and "
            "reconfigure, or use DDP_GEMM=openblas or auto");
  DDP_CHECK(backend != GemmBackend::BLIS || blis_available(), what, " asks for BLIS, but it is not available (",
            blis_version(), "): install libblis4 (tools/ddp build does), or use DDP_GEMM=openblas or auto");
}

GemmBackend from_environment() {
  const char* env = std::getenv("DDP_GEMM");
  if (env == nullptr || *env == '\0') return GemmBackend::Auto;
  const GemmBackend b = parse_gemm_backend(env, "DDP_GEMM");
  check_available(b, b == GemmBackend::BLIS ? "DDP_GEMM=blis" : "DDP_GEMM=onednn");
  return b;
}

std::atomic<int>& setting() {
  static std::atomic<int> value{static_cast<int>(from_environment())};
  return value;
}
}  // namespace

bool onednn_available() {
#ifdef DDP_WITH_ONEDNN
  return true;
#else
  return false;
#endif
}

GemmBackend parse_gemm_backend(std::string_view text, std::string_view what) {
  if (text == "auto") return GemmBackend::Auto;
  if (text == "openblas") return GemmBackend::OpenBLAS;
  if (text == "onednn") return GemmBackend::OneDNN;
  if (text == "blis") return GemmBackend::BLIS;
  DDP_FAIL(what, "='", text, "' is not a GEMM backend: use auto (per shape), openblas, onednn or blis");
}

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::OpenBLAS:
      return "openblas";
    case GemmBackend::OneDNN:
      return "onednn";
    case GemmBackend::BLIS:
      return "blis";
    default:
      return "auto";
  }
}

void set_gemm_backend(GemmBackend backend) {
  check_available(backend, backend == GemmBackend::BLIS ? "set_gemm_backend(blis)" : "set_gemm_backend(onednn)");
  setting().store(static_cast<int>(backend));
}
GemmBackend gemm_backend() { return static_cast<GemmBackend>(setting().load(std::memory_order_relaxed)); }

bool cpu_has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

GemmBackend auto_gemm_backend(int64_t M, int64_t N, int64_t K, int threads, bool with_onednn, bool avx512) {
  if (!with_onednn || !avx512) return GemmBackend::OpenBLAS;
  if (threads > 1) return GemmBackend::OpenBLAS;
  int64_t d[3] = {M, N, K};
  std::sort(d, d + 3);
  // oneDNN from 32 x 128 up (the MLP's batch-64 layers, the GPT's 1024-token linears, large squares); the
  // skinny (the 10-wide output layer) and the tiny (the 64x64x32 attention blocks) stay on OpenBLAS.
  const bool onednn_class = d[0] >= 32 && d[1] >= 128;
  return onednn_class ? GemmBackend::OneDNN : GemmBackend::OpenBLAS;
}

GemmBackend gemm_backend_for(int64_t M, int64_t N, int64_t K, int threads) {
  const GemmBackend forced = gemm_backend();
  if (forced != GemmBackend::Auto) return forced;
  return auto_gemm_backend(M, N, K, threads, onednn_available(), cpu_has_avx512());
}

std::string gemm_libraries() {
  std::string s = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
  s.erase(0, s.find_first_not_of(' '));
  s.erase(s.find_last_not_of(' ') + 1);
#ifdef DDP_WITH_ONEDNN
  s += std::string(" + ") + onednn_version();
#endif
  if (blis_available()) s += " + " + blis_version();
  return s + ", DDP_GEMM " + gemm_backend_name(gemm_backend());
}

std::string openblas_kernel() {
  const char* core = openblas_get_corename();
  const char* config = openblas_get_config();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  std::string s = core ? core : "unknown";
  s += std::string(" (OPENBLAS_CORETYPE=") + (env && *env ? env : "unset");
  if (config) s += std::string("; config: ") + config;
  return s + ")";
}

}  // namespace ddp::kernels::cpu
