// attention.cu - CUDA causal self-attention. Heads are split out of (B, T, parts*C) into contiguous
// (parts, B, n_head, T, hs) blocks so each product is one cuBLAS strided-batched gemm over B * n_head heads;
// the (T, T) scores get a causal softmax kernel (one block per row, zeros above the diagonal). The bf16
// variants (attention_bf16.h) reuse the permutes and softmax kernels and run the products as bf16 tensor-core
// GEMMs.
#include <cublas_v2.h>

#include <cmath>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/softmax.cuh"
#include "runtime/core/cuda/handles.h"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
// kSplit: dst (parts, B, nh, T, hs) <- src (B, T, parts*C); otherwise the inverse (merge heads back).
template <class S, bool kSplit>
__global__ void permute_heads_kernel(const S* src, S* dst, int64_t B, int64_t T, int64_t C, int64_t nh,
                                     int64_t parts) {
  const int64_t hs = C / nh, width = parts * C;
  DDP_CUDA_KERNEL_LOOP(i, B * T * width) {  // i indexes the (B, T, parts*C) layout
    const int64_t bt = i / width, rem = i - bt * width;
    const int64_t b = bt / T, t = bt - b * T;
    const int64_t part = rem / C, cc = rem - part * C, h = cc / hs, d = cc - h * hs;
    const int64_t j = (((part * B + b) * nh + h) * T + t) * hs + d;
    if (kSplit)
      dst[j] = src[i];
    else
      dst[i] = src[j];
  }
}

template <class S>
void permute_heads(bool split, const S* src, S* dst, int64_t B, int64_t T, int64_t C, int64_t nh,
                   int64_t parts, cudaStream_t stream) {
  const int64_t n = B * T * parts * C;
  if (split)
    permute_heads_kernel<S, true><<<grid_for(n), kBlock, 0, stream>>>(src, dst, B, T, C, nh, parts);
  else
    permute_heads_kernel<S, false><<<grid_for(n), kBlock, 0, stream>>>(src, dst, B, T, C, nh, parts);
  DDP_CUDA_CHECK_LAUNCH();
}

// Row r of the (B*nh*T, T) score matrix is query i = r % T: softmax over keys j <= i, zeros for j > i.
template <class S>
__global__ void causal_softmax_forward_kernel(S* att, int64_t rows, int64_t T) {
  __shared__ S smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    S* row = att + r * T;
    const int64_t n = r % T + 1;
    S m = row[0];
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = row[j] > m ? row[j] : m;
    m = block_allreduce(m, MaxOp(), smem);
    S s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += dev_exp(row[j] - m);
    s = block_allreduce(s, SumOp(), smem);
    const S inv = S(1) / s;
    for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j < n ? dev_exp(row[j] - m) * inv : S(0);
  }
}

// datt <- att * (datt - sum_j att * datt), in place; entries above the diagonal (att = 0) become 0.
template <class S>
__global__ void causal_softmax_backward_kernel(const S* att, S* datt, int64_t rows, int64_t T) {
  __shared__ S smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* a = att + r * T;
    S* d = datt + r * T;
    const int64_t n = r % T + 1;
    S s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += a[j] * d[j];
    s = block_allreduce(s, SumOp(), smem);
    for (int64_t j = threadIdx.x; j < T; j += blockDim.x) d[j] = j < n ? a[j] * (d[j] - s) : S(0);
  }
}

cublasStatus_t gemm_strided_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                    int n, int k, const float* alpha, const float* A, int lda, long long sa,
                                    const float* B, int ldb, long long sb, const float* beta, float* C,
                                    int ldc, long long sc, int batch) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                                   batch);
}
cublasStatus_t gemm_strided_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                    int n, int k, const double* alpha, const double* A, int lda, long long sa,
                                    const double* B, int ldb, long long sb, const double* beta, double* C,
                                    int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                                   batch);
}

// Row-major, batched: C_i (M, N) = alpha op(A_i) op(B_i) for i < batch. cuBLAS is column-major, so this asks
// for C^T = op(B)^T op(A)^T: the operands swap places and keep their transpose flags.
template <class S>
void gemm_rm(cudaStream_t stream, bool ta, bool tb, int64_t M, int64_t N, int64_t K, S alpha, const S* A,
             int64_t lda, int64_t sa, const S* B, int64_t ldb, int64_t sb, S* C, int64_t ldc, int64_t sc,
             int64_t batch) {
  cublasHandle_t h = ddp::cuda::cublas_handle();
  DDP_CUBLAS_CHECK(cublasSetStream(h, stream));
  const S beta = S(0);
  DDP_CUBLAS_CHECK(gemm_strided_batched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        int(N), int(M), int(K), &alpha, B, int(ldb), sb, A, int(lda), sa,
                                        &beta, C, int(ldc), sc, int(batch)));
}
}  // namespace

template <class S>
void attention_forward(const S* qkv, S* y, S* att, S* scratch, int64_t B, int64_t T, int64_t C,
                       int64_t n_head, cudaStream_t stream) {
  if (B * T * C == 0) return;
  const int64_t hs = C / n_head, heads = B * n_head, BTC = B * T * C;
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(hs)));
  S* q = scratch;  // (3, B, nh, T, hs): q, k, v
  S* k = q + BTC;
  S* v = k + BTC;
  S* yh = v + BTC;  // (B, nh, T, hs)
  permute_heads(true, qkv, q, B, T, C, n_head, 3, stream);
  gemm_rm<S>(stream, false, true, T, T, hs, scale, q, hs, T * hs, k, hs, T * hs, att, T, T * T,
             heads);  // q k^T
  causal_softmax_forward_kernel<S><<<row_grid(heads * T), row_block(T), 0, stream>>>(att, heads * T, T);
  DDP_CUDA_CHECK_LAUNCH();
  gemm_rm<S>(stream, false, false, T, hs, T, S(1), att, T, T * T, v, hs, T * hs, yh, hs, T * hs,
             heads);  // att v
  permute_heads(false, yh, y, B, T, C, n_head, 1, stream);
}

template <class S>
void attention_backward(const S* dy, const S* qkv, const S* att, S* dqkv, S* scratch, int64_t B, int64_t T,
                        int64_t C, int64_t n_head, cudaStream_t stream) {
  if (B * T * C == 0) return;
  const int64_t hs = C / n_head, heads = B * n_head, BTC = B * T * C;
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(hs)));
  S* q = scratch;  // (3, B, nh, T, hs)
  S* k = q + BTC;
  S* v = k + BTC;
  S* dyh = v + BTC;   // (B, nh, T, hs)
  S* dq = dyh + BTC;  // (3, B, nh, T, hs): dq, dk, dv
  S* dk = dq + BTC;
  S* dv = dk + BTC;
  S* datt = dv + BTC;  // (B, nh, T, T)
  permute_heads(true, qkv, q, B, T, C, n_head, 3, stream);
  permute_heads(true, dy, dyh, B, T, C, n_head, 1, stream);
  gemm_rm<S>(stream, false, true, T, T, hs, S(1), dyh, hs, T * hs, v, hs, T * hs, datt, T, T * T,
             heads);  // dy v^T
  gemm_rm<S>(stream, true, false, T, hs, T, S(1), att, T, T * T, dyh, hs, T * hs, dv, hs, T * hs,
             heads);  // att^T dy
  causal_softmax_backward_kernel<S>
      <<<row_grid(heads * T), row_block(T), 0, stream>>>(att, datt, heads * T, T);
  DDP_CUDA_CHECK_LAUNCH();
  gemm_rm<S>(stream, false, false, T, hs, T, scale, datt, T, T * T, k, hs, T * hs, dq, hs, T * hs,
             heads);  // ds k
  gemm_rm<S>(stream, true, false, T, hs, T, scale, datt, T, T * T, q, hs, T * hs, dk, hs, T * hs,
             heads);  // ds^T q
  permute_heads(false, dq, dqkv, B, T, C, n_head, 3, stream);
}

template void attention_forward<float>(const float*, float*, float*, float*, int64_t, int64_t, int64_t,
                                       int64_t, cudaStream_t);
template void attention_forward<double>(const double*, double*, double*, double*, int64_t, int64_t, int64_t,
                                        int64_t, cudaStream_t);
template void attention_backward<float>(const float*, const float*, const float*, float*, float*, int64_t,
                                        int64_t, int64_t, int64_t, cudaStream_t);
template void attention_backward<double>(const double*, const double*, const double*, double*, double*,
                                         int64_t, int64_t, int64_t, int64_t, cudaStream_t);

// ---- bf16 compute (attention_bf16.h) ----
namespace {
// bf16 copies of float32 operands, from the stream-ordered pool; freed (stream-ordered) on destruction.
struct Bf16Scratch {
  BFloat16* p = nullptr;
  cudaStream_t stream;
  Bf16Scratch(int64_t n, cudaStream_t s) : stream(s) {
    DDP_CUDA_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&p), static_cast<size_t>(n) * sizeof(BFloat16), s));
  }
  ~Bf16Scratch() { cudaFreeAsync(p, stream); }
  Bf16Scratch(const Bf16Scratch&) = delete;
  Bf16Scratch& operator=(const Bf16Scratch&) = delete;
};
}  // namespace

void attention_forward_bf16(const float* qkv, float* y, float* att, float* scratch, int64_t B, int64_t T,
                            int64_t C, int64_t n_head, cudaStream_t stream) {
  if (B * T * C == 0) return;
  const int64_t hs = C / n_head, heads = B * n_head, BTC = B * T * C;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  float* q = scratch;  // (3, B, nh, T, hs) float32, then yh (B, nh, T, hs)
  float* yh = q + 3 * BTC;
  Bf16Scratch qkv16(3 * BTC, stream), att16(heads * T * T, stream);
  permute_heads(true, qkv, q, B, T, C, n_head, 3, stream);
  ddp::cuda::StreamGuard sg(stream);  // the bf16 kernels run on the current stream
  to_bf16(q, qkv16.p, 3 * BTC);
  const BFloat16 *q16 = qkv16.p, *k16 = q16 + BTC, *v16 = k16 + BTC;
  gemm_bf16(false, true, heads, T, T, hs, scale, q16, T * hs, k16, T * hs, 0.f, att, T * T);  // q k^T
  causal_softmax_forward_kernel<float><<<row_grid(heads * T), row_block(T), 0, stream>>>(att, heads * T, T);
  DDP_CUDA_CHECK_LAUNCH();
  to_bf16(att, att16.p, heads * T * T);
  gemm_bf16(false, false, heads, T, hs, T, 1.f, att16.p, T * T, v16, T * hs, 0.f, yh, T * hs);  // att v
  permute_heads(false, yh, y, B, T, C, n_head, 1, stream);
}

void attention_backward_bf16(const float* dy, const float* qkv, const float* att, float* dqkv, float* scratch,
                             int64_t B, int64_t T, int64_t C, int64_t n_head, cudaStream_t stream) {
  if (B * T * C == 0) return;
  const int64_t hs = C / n_head, heads = B * n_head, BTC = B * T * C;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  float* q = scratch;        // (3, B, nh, T, hs)
  float* dyh = q + 3 * BTC;  // (B, nh, T, hs)
  float* dq = dyh + BTC;     // (3, B, nh, T, hs): dq, dk, dv
  float* dk = dq + BTC;
  float* dv = dk + BTC;
  float* datt = dv + BTC;  // (B, nh, T, T)
  Bf16Scratch qkv16(3 * BTC, stream), dy16(BTC, stream), t16(heads * T * T, stream);
  permute_heads(true, qkv, q, B, T, C, n_head, 3, stream);
  permute_heads(true, dy, dyh, B, T, C, n_head, 1, stream);
  ddp::cuda::StreamGuard sg(stream);
  to_bf16(q, qkv16.p, 3 * BTC);
  to_bf16(dyh, dy16.p, BTC);
  to_bf16(att, t16.p, heads * T * T);
  const BFloat16 *q16 = qkv16.p, *k16 = q16 + BTC, *v16 = k16 + BTC;
  gemm_bf16(false, true, heads, T, T, hs, 1.f, dy16.p, T * hs, v16, T * hs, 0.f, datt, T * T);  // dy v^T
  gemm_bf16(true, false, heads, T, hs, T, 1.f, t16.p, T * T, dy16.p, T * hs, 0.f, dv, T * hs);  // att^T dy
  causal_softmax_backward_kernel<float>
      <<<row_grid(heads * T), row_block(T), 0, stream>>>(att, datt, heads * T, T);
  DDP_CUDA_CHECK_LAUNCH();
  to_bf16(datt, t16.p, heads * T * T);  // att's bf16 copy is no longer needed: reuse it for dscore
  gemm_bf16(false, false, heads, T, hs, T, scale, t16.p, T * T, k16, T * hs, 0.f, dq, T * hs);  // ds k
  gemm_bf16(true, false, heads, T, hs, T, scale, t16.p, T * T, q16, T * hs, 0.f, dk, T * hs);   // ds^T q
  permute_heads(false, dq, dqkv, B, T, C, n_head, 3, stream);
}

}  // namespace ddp::kernels::cuda
