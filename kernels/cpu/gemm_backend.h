// gemm_backend.h - which library runs a CPU float32 matrix product: OpenBLAS or oneDNN (dnnl_sgemm), chosen
// per shape class and thread budget by a fixed rule measured on the development machine (docs/benchmarks.md,
// "GEMM backends"), or forced by DDP_GEMM / set_gemm_backend. float64 products always run on OpenBLAS
// (oneDNN has no double-precision GEMM), so the float64 exactness suites see one library.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace ddp::kernels::cpu {

enum class GemmBackend { Auto, OpenBLAS, OneDNN };

// The process-wide setting. Until set_gemm_backend is called it comes from the environment variable
// DDP_GEMM=auto|openblas|onednn (read once; default auto). Asking for oneDNN in a build without it is an error
// naming the fix.
void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();

// Parses "auto", "openblas" or "onednn"; anything else is an error listing the three (`what` names the source,
// e.g. "DDP_GEMM").
GemmBackend parse_gemm_backend(std::string_view text, std::string_view what);
const char* gemm_backend_name(GemmBackend backend);  // "auto", "openblas", "onednn"

// True when this build links oneDNN (CMake found libdnnl-dev).
bool onednn_available();

// The library that runs one float32 product C (M, N) += A (M, K) B (K, N) on `threads` threads: the forced one,
// or under Auto:
//  - OpenBLAS when oneDNN is not built in;
//  - oneDNN for every product when threads > 1: one thread pool per process (OpenBLAS's pthreads and
//    oneDNN's OpenMP threads both spin after a call; alternating them on 2 cores slowed products 2-10x), and
//    at 2 threads oneDNN ran the model shapes 1.3-2x faster;
//  - at 1 thread, oneDNN for products with min(M, N, K) >= 32 and M*N*K >= 2^21 (the MLP's 1024-wide layers
//    1.1-1.4x, the GPT's linears 1.0-1.1x), OpenBLAS for the skinny and tiny ones (a 10-wide output layer,
//    the 64x64x32 attention blocks), where it was up to 2x faster.
GemmBackend gemm_backend_for(int64_t M, int64_t N, int64_t K, int threads);

// Products run so far in this process by each library (float32 and float64 together; gemm.cpp counts them),
// for tests and benchmark reports.
struct GemmCounts {
  int64_t openblas = 0, onednn = 0;
};
GemmCounts gemm_counts();

// The OpenMP thread count oneDNN would use for a product started by the calling thread now (its
// omp_get_max_threads(); gemm sets it to the budget before each oneDNN product); 0 without oneDNN.
int onednn_threads_of_this_thread();

// One line for benchmark headers: "OpenBLAS 0.3.21 + oneDNN 2.6.3 (OpenMP), DDP_GEMM auto".
std::string gemm_libraries();

}  // namespace ddp::kernels::cpu
