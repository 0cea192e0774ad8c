// multi_tensor.cu - the multi-tensor kernels of multi_tensor.h. A launch carries its table of tensors
// (pointers, lengths, per-tensor scalars: TensorTable) as the kernel argument - up to 32764 bytes since
// CUDA 12.1 on sm_70+, 4096 before - and block b handles chunk table.block[b].chunk of the tensor in slot
// table.block[b].slot. The plan (which tensors and blocks go to which launch) is
// kernels/cpu/multi_tensor.h's, tested on the CPU. The sum of squares is deterministic: each block reduces
// its chunk in a fixed order (block_reduce_in_fixed_order's, which the CPU twin chunked_sum_of_squares
// repeats), writes one partial at its plan position, and one block sums the partials in a fixed order; the
// same input gives the same bits on every run. The optimizer kernels run kernels/cpu/optim_math.h per
// element, as the single-tensor kernels do (kernels/cuda/optim_step.cuh: each block plans 16-byte accesses
// over its chunk, vector_access.cuh; so does the scaling). The sum of squares keeps one element per thread
// access: its summation order is the CPU twin's.
#include "kernels/cpu/multi_tensor.h"
#include "kernels/cpu/optim_math.h"
#include "kernels/cuda/multi_tensor.h"
#include "kernels/cuda/optim_step.cuh"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
using cpu::kMultiTensorChunk;
using cpu::kMultiTensorThreads;
using cpu::MultiTensorBlock;

#if CUDART_VERSION >= 12010
constexpr int kMaxTensors = 320, kMaxBlocks = 1536;
constexpr size_t kKernelArgumentBytes = 32764;
#else
constexpr int kMaxTensors = 32, kMaxBlocks = 128;
constexpr size_t kKernelArgumentBytes = 4096;
#endif

struct NoScalars {};

// One launch's table: kPointers pointers per tensor (parameter, gradient, state...), its length, its own
// scalars, and the blocks.
template <int kPointers, class PerTensor>
struct TensorTable {
  void* ptr[kPointers][kMaxTensors];
  int64_t numel[kMaxTensors];
  PerTensor scalars[kMaxTensors];
  MultiTensorBlock block[kMaxBlocks];
};
// The largest table (AdamW in double) with the largest other arguments must fit one kernel argument list.
static_assert(sizeof(TensorTable<4, cpu::AdamWBiasCorrection<double>>) + sizeof(cpu::AdamWConstants<double>) +
                      64 <=
                  kKernelArgumentBytes,
              "multi-tensor table larger than a kernel argument may be");

struct ChunkRange {
  int slot;
  int64_t begin, end;
};
template <class Table>
__device__ __forceinline__ ChunkRange chunk_of_this_block(const Table& t) {
  const MultiTensorBlock b = t.block[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(b.chunk) * kMultiTensorChunk;
  const int64_t end =
      begin + kMultiTensorChunk < t.numel[b.slot] ? begin + kMultiTensorChunk : t.numel[b.slot];
  return {b.slot, begin, end};
}

// The block's threads' accumulators summed by halving (cpu::block_reduce_in_fixed_order's tree); thread 0
// gets the total.
__device__ __forceinline__ double block_sum_in_fixed_order(double acc) {
  __shared__ double partial[kMultiTensorThreads];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kMultiTensorThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  return partial[0];
}

template <class T>
__global__ void __launch_bounds__(kMultiTensorThreads)
    sum_of_squares_kernel(TensorTable<1, NoScalars> t, double* partials) {
  const ChunkRange r = chunk_of_this_block(t);
  const T* x = static_cast<const T*>(t.ptr[0][r.slot]);
  double acc = 0;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += kMultiTensorThreads) {
    const double v = static_cast<double>(x[i]);
    acc = fma(v, v, acc);
  }
  const double total = block_sum_in_fixed_order(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kMultiTensorThreads)
    sum_partials_kernel(const double* partials, int64_t count, double* out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < count; i += kMultiTensorThreads) acc = acc + partials[i];
  const double total = block_sum_in_fixed_order(acc);
  if (threadIdx.x == 0) *out = total;
}

__global__ void clip_coefficient_kernel(const double* sum_of_squares, double max_norm, double* norm,
                                        double* coefficient) {
  const double n = sqrt(*sum_of_squares);
  *norm = n;
  *coefficient = n > max_norm && n > 0 ? max_norm / (n + 1e-6) : 1.0;
}

template <class T>
__global__ void __launch_bounds__(kMultiTensorThreads)
    scale_kernel(TensorTable<1, NoScalars> t, const double* coefficient) {
  const double c = *coefficient;
  if (c == 1.0) return;
  const T a = static_cast<T>(c);
  const ChunkRange r = chunk_of_this_block(t);
  T* x = static_cast<T*>(t.ptr[0][r.slot]) + r.begin;
  constexpr int W = vector_width<T>();
  const int32_t n = static_cast<int32_t>(r.end - r.begin);  // at most kMultiTensorChunk
  const VectorPlan p = plan_vectors(W, n, x);
  for_each_planned<int32_t>(
      p, static_cast<int32_t>(threadIdx.x), kMultiTensorThreads,
      [&](int32_t i) {
        Pack<T, W> v = load_pack<W>(x + i);
#pragma unroll
        for (int l = 0; l < W; ++l) v.lane[l] = v.lane[l] * a;
        store_pack<W>(x + i, v);
      },
      [&](int32_t i) { x[i] = x[i] * a; });
}

// Thread threadIdx.x's share of `step` over the block's chunk (the step's pointers at the chunk's start).
template <class Step>
__device__ __forceinline__ void step_chunk(const Step& step, const ChunkRange& r) {
  const int32_t n = static_cast<int32_t>(r.end - r.begin);  // at most kMultiTensorChunk
  run_step<int32_t>(step.plan(n), step, static_cast<int32_t>(threadIdx.x), kMultiTensorThreads);
}

template <class T>
__global__ void __launch_bounds__(kMultiTensorThreads)
    sgd_kernel(TensorTable<3, uint8_t> t, cpu::SgdConstants<T> c) {
  const ChunkRange r = chunk_of_this_block(t);
  T* w = static_cast<T*>(t.ptr[0][r.slot]) + r.begin;
  const T* g = static_cast<const T*>(t.ptr[1][r.slot]) + r.begin;
  T* buf = static_cast<T*>(t.ptr[2][r.slot]);
  step_chunk(SgdStep<T>{w, g, buf ? buf + r.begin : nullptr, c, t.scalars[r.slot] != 0}, r);
}

template <class T>
__global__ void __launch_bounds__(kMultiTensorThreads)
    adamw_kernel(TensorTable<4, cpu::AdamWBiasCorrection<T>> t, cpu::AdamWConstants<T> c) {
  const ChunkRange r = chunk_of_this_block(t);
  T* w = static_cast<T*>(t.ptr[0][r.slot]) + r.begin;
  const T* g = static_cast<const T*>(t.ptr[1][r.slot]) + r.begin;
  T* m = static_cast<T*>(t.ptr[2][r.slot]) + r.begin;
  T* v = static_cast<T*>(t.ptr[3][r.slot]) + r.begin;
  step_chunk(AdamWStep<T>{w, m, v, g, c, t.scalars[r.slot]}, r);
}

// Fills one table per launch of the plan over `sizes` and calls launch(table, blocks, first_block).
// pointer(k, i): the k-th pointer of tensor i; scalars(i): its own scalars.
template <int kPointers, class PerTensor, class Pointer, class Scalars, class Launch>
void for_each_launch(const char* who, const std::vector<int64_t>& sizes, const Pointer& pointer,
                     const Scalars& scalars, const Launch& launch) {
  for (const auto& l : cpu::plan_multi_tensor(sizes, kMultiTensorChunk, kMaxTensors, kMaxBlocks)) {
    TensorTable<kPointers, PerTensor> t;
    for (size_t s = 0; s < l.tensors.size(); ++s) {
      const size_t i = static_cast<size_t>(l.tensors[s]);
      for (int k = 0; k < kPointers; ++k) t.ptr[k][s] = pointer(k, i);
      DDP_CHECK(t.ptr[0][s] != nullptr, who, ": tensor ", i, " of ", sizes[i],
                " elements has no data pointer");
      t.numel[s] = sizes[i];
      t.scalars[s] = scalars(i);
    }
    for (size_t b = 0; b < l.blocks.size(); ++b) t.block[b] = l.blocks[b];
    launch(t, static_cast<int>(l.blocks.size()), l.first_block);
    DDP_CUDA_CHECK_LAUNCH();
  }
}

void check_lengths(const char* who, size_t n, std::initializer_list<size_t> others) {
  for (size_t o : others)
    DDP_CHECK(o == n, who, ": the lists have different lengths (", n, " sizes vs ", o,
              " entries); pass one entry per tensor in every list");
}

// Calls run(T{}) with T the C++ type of a float32 or float64 dtype; other dtypes are refused by name.
template <class Run>
void with_float_type(const char* who, DType dtype, Run&& run) {
  if (dtype == DType::F32) return run(0.0f);
  if (dtype == DType::F64) return run(0.0);
  DDP_FAIL(who, " on CUDA: dtype ", dtype_name(dtype), " not supported (float32 or float64)");
}
}  // namespace

int multi_tensor_max_tensors() { return kMaxTensors; }
int multi_tensor_max_blocks() { return kMaxBlocks; }

int64_t sum_of_squares_partial_count(const std::vector<int64_t>& sizes) {
  return cpu::plan_block_count(cpu::plan_multi_tensor(sizes, kMultiTensorChunk, kMaxTensors, kMaxBlocks));
}

void multi_tensor_sum_of_squares_partials(const std::vector<const void*>& data,
                                          const std::vector<int64_t>& sizes, DType dtype, double* partials,
                                          cudaStream_t stream) {
  const char* who = "multi_tensor_sum_of_squares";
  check_lengths(who, sizes.size(), {data.size()});
  auto pointer = [&](int, size_t i) { return const_cast<void*>(data[i]); };
  auto none = [](size_t) { return NoScalars{}; };
  auto run = [&](auto zero) {
    using T = decltype(zero);
    for_each_launch<1, NoScalars>(who, sizes, pointer, none, [&](const auto& t, int blocks, int64_t first) {
      sum_of_squares_kernel<T><<<blocks, kMultiTensorThreads, 0, stream>>>(t, partials + first);
    });
  };
  with_float_type(who, dtype, run);
}

void sum_partials(const double* partials, int64_t count, double* out, cudaStream_t stream) {
  sum_partials_kernel<<<1, kMultiTensorThreads, 0, stream>>>(partials, count, out);
  DDP_CUDA_CHECK_LAUNCH();
}

void clip_coefficient(const double* sum_of_squares, double max_norm, double* norm, double* coefficient,
                      cudaStream_t stream) {
  clip_coefficient_kernel<<<1, 1, 0, stream>>>(sum_of_squares, max_norm, norm, coefficient);
  DDP_CUDA_CHECK_LAUNCH();
}

void multi_tensor_scale(const std::vector<void*>& data, const std::vector<int64_t>& sizes, DType dtype,
                        const double* coefficient, cudaStream_t stream) {
  const char* who = "multi_tensor_scale";
  check_lengths(who, sizes.size(), {data.size()});
  auto pointer = [&](int, size_t i) { return data[i]; };
  auto none = [](size_t) { return NoScalars{}; };
  auto run = [&](auto zero) {
    using T = decltype(zero);
    for_each_launch<1, NoScalars>(who, sizes, pointer, none, [&](const auto& t, int blocks, int64_t) {
      scale_kernel<T><<<blocks, kMultiTensorThreads, 0, stream>>>(t, coefficient);
    });
  };
  with_float_type(who, dtype, run);
}

void multi_tensor_sgd_step(const std::vector<void*>& params, const std::vector<const void*>& grads,
                           const std::vector<void*>& momentum, const std::vector<uint8_t>& first,
                           const std::vector<int64_t>& sizes, DType dtype, double lr, double momentum_factor,
                           double dampening, double weight_decay, bool nesterov, cudaStream_t stream) {
  const char* who = "multi_tensor_sgd_step";
  check_lengths(who, sizes.size(), {params.size(), grads.size(), momentum.size(), first.size()});
  auto pointer = [&](int k, size_t i) {
    if (k == 0) return params[i];
    if (k == 1) return const_cast<void*>(grads[i]);
    return momentum_factor != 0 ? momentum[i] : nullptr;  // as the CPU kernel: no buffer without momentum
  };
  auto first_of = [&](size_t i) { return first[i]; };
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const auto c = cpu::sgd_constants<T>(lr, momentum_factor, dampening, weight_decay, nesterov);
    for_each_launch<3, uint8_t>(who, sizes, pointer, first_of, [&](const auto& t, int blocks, int64_t) {
      sgd_kernel<T><<<blocks, kMultiTensorThreads, 0, stream>>>(t, c);
    });
  };
  with_float_type(who, dtype, run);
}

void multi_tensor_adamw_step(const std::vector<void*>& params, const std::vector<const void*>& grads,
                             const std::vector<void*>& exp_avg, const std::vector<void*>& exp_avg_sq,
                             const std::vector<int64_t>& sizes, DType dtype, double lr, double beta1,
                             double beta2, double eps, double weight_decay,
                             const std::vector<double>& bias_correction1,
                             const std::vector<double>& bias_correction2, cudaStream_t stream) {
  const char* who = "multi_tensor_adamw_step";
  check_lengths(who, sizes.size(),
                {params.size(), grads.size(), exp_avg.size(), exp_avg_sq.size(), bias_correction1.size(),
                 bias_correction2.size()});
  auto pointer = [&](int k, size_t i) {
    if (k == 0) return params[i];
    if (k == 1) return const_cast<void*>(grads[i]);
    return k == 2 ? exp_avg[i] : exp_avg_sq[i];
  };
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const auto c = cpu::adamw_constants<T>(lr, beta1, beta2, eps, weight_decay);
    auto correction = [&](size_t i) {
      return cpu::adamw_bias_correction<T>(lr, bias_correction1[i], bias_correction2[i]);
    };
    for_each_launch<4, cpu::AdamWBiasCorrection<T>>(
        who, sizes, pointer, correction, [&](const auto& t, int blocks, int64_t) {
          adamw_kernel<T><<<blocks, kMultiTensorThreads, 0, stream>>>(t, c);
        });
  };
  with_float_type(who, dtype, run);
}

}  // namespace ddp::kernels::cuda
