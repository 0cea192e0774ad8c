// gemm_blis.cpp - BLIS's bli_sgemm, loaded with dlopen (gemm_blis.h says why). BLIS's typed API takes each
// matrix with a row and a column stride, so a row-major matrix is (rs = leading dimension, cs = 1), and op()
// applies the transpose to the stored matrix. The types come from BLIS's documentation (BLISTypedAPI.md):
// dim_t and inc_t are gint_t, whose width the library reports (bli_info_get_int_type_size: 32 or 64);
// trans_t is BLIS_NO_TRANSPOSE = 0 or BLIS_TRANSPOSE = 0x08 (the transpose bit, BLIS_TRANS_SHIFT = 3).
#include "kernels/cpu/gemm_blis.h"

#include <dlfcn.h>

#include <cstdint>
#include <string>

#include "runtime/core/error.h"

namespace ddp::kernels::cpu {
namespace {

constexpr int kNoTranspose = 0x0, kTranspose = 0x8;

using SgemmFn64 = void (*)(int, int, int64_t, int64_t, int64_t, const float*, const float*, int64_t, int64_t,
                           const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t);
using SgemmFn32 = void (*)(int, int, int32_t, int32_t, int32_t, const float*, const float*, int32_t, int32_t,
                           const float*, int32_t, int32_t, const float*, float*, int32_t, int32_t);

struct Blis {
  void* handle = nullptr;
  void* sgemm = nullptr;
  int int_bits = 64;
  std::string version;  // or why not loaded
};

const Blis& blis() {
  static const Blis b = [] {
    Blis out;
    out.handle = ::dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!out.handle) {
      const char* err = ::dlerror();
      out.version = std::string("BLIS not loaded: ") + (err ? err : "libblis.so.4 not found") +
                    " (apt-get install libblis4)";
      return out;
    }
    out.sgemm = ::dlsym(out.handle, "bli_sgemm");
    auto int_size = reinterpret_cast<int64_t (*)()>(::dlsym(out.handle, "bli_info_get_int_type_size"));
    auto version = reinterpret_cast<const char* (*)()>(::dlsym(out.handle, "bli_info_get_version_str"));
    auto arch_id = reinterpret_cast<int (*)()>(::dlsym(out.handle, "bli_arch_query_id"));
    auto arch_name = reinterpret_cast<const char* (*)(int)>(::dlsym(out.handle, "bli_arch_string"));
    auto set_threads = reinterpret_cast<void (*)(int64_t)>(::dlsym(out.handle, "bli_thread_set_num_threads"));
    if (!out.sgemm || !int_size || !version || !arch_id || !arch_name || !set_threads) {
      out.sgemm = nullptr;
      out.version = "BLIS not loaded: libblis.so.4 lacks bli_sgemm or the bli_info/bli_arch functions";
      return out;
    }
    out.int_bits = static_cast<int>(int_size());
    if (out.int_bits != 32 && out.int_bits != 64) {
      out.sgemm = nullptr;
      out.version = "BLIS not loaded: it reports integers of " + std::to_string(out.int_bits) + " bits";
      return out;
    }
    if (out.int_bits == 64) set_threads(1);  // (a 32-bit build's setter takes 32 bits: left at its default, 1)
    out.version = std::string("BLIS ") + version() + " (" + arch_name(arch_id()) + " kernels)";
    return out;
  }();
  return b;
}

}  // namespace

bool blis_available() { return blis().sgemm != nullptr; }

std::string blis_version() { return blis().version; }

void blis_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const Blis& b = blis();
  DDP_CHECK(b.sgemm != nullptr, "gemm: BLIS was asked for but is not available: ", b.version);
  const int ta = trans_a ? kTranspose : kNoTranspose, tb = trans_b ? kTranspose : kNoTranspose;
  if (b.int_bits == 64) {
    reinterpret_cast<SgemmFn64>(b.sgemm)(ta, tb, M, N, K, &alpha, A, lda, 1, B, ldb, 1, &beta, C, ldc, 1);
  } else {
    DDP_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX && ldb <= INT32_MAX &&
                  ldc <= INT32_MAX,
              "gemm: a product of ", M, " x ", N, " x ", K, " does not fit this BLIS's 32-bit integers");
    reinterpret_cast<SgemmFn32>(b.sgemm)(ta, tb, static_cast<int32_t>(M), static_cast<int32_t>(N),
                                         static_cast<int32_t>(K), &alpha, A, static_cast<int32_t>(lda), 1, B,
                                         static_cast<int32_t>(ldb), 1, &beta, C, static_cast<int32_t>(ldc), 1);
  }
}

}  // namespace ddp::kernels::cpu
