// simd_target.h - which instruction set the Highway CPU kernels run with (chosen at run time from the CPU,
// the best of those compiled in: AVX3 = AVX-512, AVX2, SSE4, SSSE3, SCALAR), and the cap a user can put on
// that choice with the environment variable DDP_CPU_ISA (e.g. avx2: the AVX2 kernels on an AVX-512 CPU, to
// measure or test the code an AVX2-only machine runs). For logs, benchmarks and tests.
#pragma once
#include <cstdint>
#include <string>

namespace ddp::kernels::cpu {
// The Highway target bit (HWY_AVX3, ...) the dispatcher picks now.
int64_t simd_target();
// Its name ("AVX3", "AVX2", ...).
const char* simd_target_name();

// The Highway targets DDP_CPU_ISA's value rules out: those better than the named one. Accepted (any case):
// "avx3" or "avx512", "avx2", "sse4", "ssse3"; "" or "best" rule out none. Anything else:
// std::invalid_argument naming the value and the accepted ones.
int64_t simd_targets_above(const std::string& isa);
// DDP_CPU_ISA as the library read it when it was loaded ("" when unset), and applied: the dispatcher never
// picks a target above it (a cap above what the CPU has changes nothing), and a cap below AVX-512 also sets
// ONEDNN_MAX_CPU_ISA (AVX2, or SSE41 below that) unless the environment has it. OpenBLAS chooses its kernels
// before this library loads: a caller capping the ISA sets OPENBLAS_CORETYPE too (bench_machine warns when
// they disagree). An unknown value is not applied (the cap is then ""): the library prints the message of
// simd_targets_above on stderr at load and keeps it for simd_isa_cap_error(), and bench_machine refuses to
// run (a benchmark must not measure under a cap the user believes is there), while a Python session that
// loaded the library goes on.
const std::string& simd_isa_cap();
// That message, or "" when DDP_CPU_ISA is unset or known.
const std::string& simd_isa_cap_error();
// Whether that cap rules out AVX-512 (avx2 and below).
bool simd_isa_cap_below_avx512();
}  // namespace ddp::kernels::cpu
