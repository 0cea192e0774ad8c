// gemm_backend.h - which library runs a CPU float32 matrix product: OpenBLAS or oneDNN (dnnl_sgemm), chosen
// per shape class and thread budget by a fixed rule measured on the development machine (docs/benchmarks.md,
// "GEMM backends"), or forced by DDP_GEMM / set_gemm_backend - which also offers BLIS (loaded at run time when
// libblis4 is installed, gemm_blis.h; measured beside the others, not in the automatic rule). float64 products
// always run on OpenBLAS (oneDNN has no double-precision GEMM), so the float64 exactness suites see one library.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace ddp::kernels::cpu {

enum class GemmBackend { Auto, OpenBLAS, OneDNN, BLIS };

// The process-wide setting. Until set_gemm_backend is called it comes from the environment variable
// DDP_GEMM=auto|openblas|onednn|blis (read once; default auto). Asking for oneDNN in a build without it, or for
// BLIS where libblis.so.4 does not load, is an error naming the fix.
void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();

// Parses "auto", "openblas", "onednn" or "blis"; anything else is an error listing them (`what` names the
// source, e.g. "DDP_GEMM").
GemmBackend parse_gemm_backend(std::string_view text, std::string_view what);
const char* gemm_backend_name(GemmBackend backend);  // "auto", "openblas", "onednn", "blis"

// True when this build links oneDNN (CMake found libdnnl-dev).
bool onednn_available();

// The library that runs one float32 product C (M, N) += A (M, K) B (K, N) on `threads` threads: the forced
// one, or under Auto (measured 2026-12-01 on the 2-core AMD EPYC development machine, docs/benchmarks.md):
//  - OpenBLAS when oneDNN is not built in;
//  - OpenBLAS for every product when threads > 1: Debian's oneDNN threads with OpenMP, whose workers spin
//    between parallel regions; with other work on the cores (a loaded machine, or our own non-GEMM ops) the
//    MLP step at 2 threads took 8 ms on OpenBLAS and 38-110 ms on oneDNN (10 ms with OMP_WAIT_POLICY=passive,
//    which a library cannot set once libgomp is loaded), and mixing both pools in one process was worse
//    still. (gemm.cpp runs the products whose blocks this rule gives to oneDNN at one thread as those blocks
//    on our own intra-op pool instead, each a 1-thread dnnl_sgemm: no OpenMP team; this rule then sees
//    threads = 1.)
//  - at 1 thread (no pool: both libraries run in the calling thread), oneDNN for every product whose smallest
//    dimension is >= 32 and the next >= 128: the MLP's layers at batch 64 (forward, input and weight
//    gradients; its GEMMs per step 4.4-4.6 -> 3.8-4.1 ms of CPU time), the GPT's 1024-token linears and large
//    squares - and OpenBLAS for the rest: the 10-wide output layer and the 64x64x32 attention blocks
//    (OpenBLAS up to 2x faster there). The GPT's linears went to OpenBLAS until 2026-12-04 (oneDNN then
//    regenerated code inside the training step, ~120 page faults per step); measured again on an AMD EPYC Zen
//    5 guest (AVX-512): the GPT step's 26 linear products 0.93x OpenBLAS's time on oneDNN, the gpt's
//    compute-only step at world 2 0.86-0.96x the old rule's (median 0.91x over 6 rounds), 2.7 page faults per
//    step, 1024^3 at 244 vs 232 GFLOP/s.
//  - and these products go to oneDNN only where the CPU has AVX-512: on an AVX2-only CPU (AMD EPYC
//    Zen 2, measured 2026-12-03) OpenBLAS's Haswell kernels ran the MLP step's GEMMs in 8.7-8.9 ms, oneDNN in
//    10.8-11.1 ms and BLIS in 11.2-11.5 ms at 1 thread, so OpenBLAS takes every product there.
GemmBackend gemm_backend_for(int64_t M, int64_t N, int64_t K, int threads);
// The rule of DDP_GEMM=auto itself, for a given machine: whether oneDNN is built in and the CPU has AVX-512.
GemmBackend auto_gemm_backend(int64_t M, int64_t N, int64_t K, int threads, bool with_onednn, bool avx512);
// True when this CPU runs AVX-512F (the automatic rule's machine key).
bool cpu_has_avx512();

// Products run so far in this process by each library (float32 and float64 together; gemm.cpp counts them),
// for tests and benchmark reports.
struct GemmCounts {
  int64_t openblas = 0, onednn = 0, blis = 0;
};
GemmCounts gemm_counts();

// The OpenMP thread count oneDNN would use for a product started by the calling thread now (its
// omp_get_max_threads(); gemm sets it to the budget before each oneDNN product); 0 without oneDNN.
int onednn_threads_of_this_thread();

// One line for benchmark headers: "OpenBLAS 0.3.21 + oneDNN 2.6.3 (OpenMP) + BLIS 0.9.0 (zen3 kernels), DDP_GEMM
// auto" (BLIS when it loads).
std::string gemm_libraries();
// The kernels OpenBLAS runs on this CPU: "Haswell (OPENBLAS_CORETYPE=Haswell; config: OpenBLAS 0.3.21
// DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64)" - openblas_get_corename(), the environment's choice
// ("unset": OpenBLAS detected the CPU itself) and openblas_get_config().
std::string openblas_kernel();

}  // namespace ddp::kernels::cpu
