// simd_target.h - which instruction set the Highway CPU kernels run with (chosen at run time from the CPU,
// the best of those compiled in: AVX3 = AVX-512, AVX2, SSE4, SSSE3, SCALAR). For logs, benchmarks and tests.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {
// The Highway target bit (HWY_AVX3, ...) the dispatcher picks now.
int64_t simd_target();
// Its name ("AVX3", "AVX2", ...).
const char* simd_target_name();
}  // namespace ddp::kernels::cpu
