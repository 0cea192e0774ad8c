// mlp_bf16.h - the fused bf16 MLP's GELU GEMMs on the GPU (runtime/ops/mlp_bf16.h); same names and meanings
// as kernels/cpu/mlp_bf16.h, on ddp::cuda::current_stream(). Where mlp_bf16_plan.h allows, each is one
// cuBLASLt matmul (bf16 tensor cores, float32 accumulation) whose epilogue does the per-element work:
// CUBLASLT_EPILOGUE_GELU_AUX_BIAS (hidden in bf16, the pre-activation as the bf16 aux matrix) and
// CUBLASLT_EPILOGUE_DGELU (d_pre in bf16; the bias gradient from our column sums of d_pre: cuBLASLt's
// DGELU_BGRAD reduction was slow on the H200). Otherwise a cuBLAS bf16 GEMM
// into float32 and a kernel running kernels/cpu/mlp_bf16_epilogue.h's functions (column sums from reduce.h).
// Scratch memory (cuBLASLt's 32 MiB workspace, the fallback's float32 accumulator) comes from `workspace`
// (kernels/cuda/workspace.h; the op passes the caching allocator's, runtime/ops/cuda_workspace.h).
#pragma once
#include <cstdint>

#include "kernels/cuda/workspace.h"
#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

void gelu_linear_bf16(int64_t rows, int64_t out, int64_t in, const BFloat16* x, const BFloat16* w,
                      const BFloat16* bias, BFloat16* hidden, BFloat16* pre, const WorkspaceFn& workspace);

void dgelu_matmul_bf16(int64_t rows, int64_t hidden, int64_t n, const BFloat16* g, const BFloat16* w,
                       const BFloat16* pre, BFloat16* d_pre, BFloat16* d_bias, const WorkspaceFn& workspace);

// How many calls took the cuBLASLt epilogue and how many the fallback, in this process (the GPU tests check
// that the case they mean to test ran).
struct MlpBf16PathCounts {
  int64_t fused = 0, fallback = 0;
};
MlpBf16PathCounts mlp_bf16_path_counts();

}  // namespace ddp::kernels::cuda
