// shm_reduce.cpp - typed, vectorizable loops behind reduce_inputs().
#include "runtime/distributed/shm/shm_reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/core/error.h"

namespace ddp::dist::shm {

namespace {

template <class T, class Op>
void fold(T* __restrict out, const T* __restrict a, const T* __restrict b, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
}
template <class T, class Op>
void fold_into(T* __restrict out, const T* __restrict b, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) out[i] = op(out[i], b[i]);
}

template <class T, class Op>
void reduce_typed(T* out, const void* const* in, int n_in, size_t n, Op op) {
  const T* first = static_cast<const T*>(in[0]);
  if (n_in == 1) {
    if (out != first) std::copy(first, first + n, out);
    return;
  }
  // Two at a time into out, then fold the rest (out aliases at most in[0], read before written).
  if (out == first) {
    fold_into(out, static_cast<const T*>(in[1]), n, op);
  } else {
    fold(out, first, static_cast<const T*>(in[1]), n, op);
  }
  for (int k = 2; k < n_in; ++k) fold_into(out, static_cast<const T*>(in[k]), n, op);
}

template <class T>
void reduce_op(T* out, const void* const* in, int n_in, size_t n, ReduceOp op, int divisor) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      reduce_typed(out, in, n_in, n, [](T a, T b) { return static_cast<T>(a + b); });
      if (op == ReduceOp::Avg && divisor != 1) {
        const T d = static_cast<T>(divisor);
        for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(out[i] / d);
      }
      return;
    case ReduceOp::Max:
      return reduce_typed(out, in, n_in, n, [](T a, T b) { return std::max(a, b); });
    case ReduceOp::Min:
      return reduce_typed(out, in, n_in, n, [](T a, T b) { return std::min(a, b); });
  }
}

// bfloat16: accumulate a block in float32, round once.
void reduce_bf16(BFloat16* out, const void* const* in, int n_in, size_t n, ReduceOp op, int divisor) {
  constexpr size_t kBlock = 512;
  float acc[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    const auto* first = static_cast<const BFloat16*>(in[0]) + base;
    for (size_t i = 0; i < m; ++i) acc[i] = first[i].to_float();
    for (int k = 1; k < n_in; ++k) {
      const auto* src = static_cast<const BFloat16*>(in[k]) + base;
      for (size_t i = 0; i < m; ++i) {
        const float v = src[i].to_float();
        acc[i] = op == ReduceOp::Max ? std::max(acc[i], v) : op == ReduceOp::Min ? std::min(acc[i], v) : acc[i] + v;
      }
    }
    if (op == ReduceOp::Avg)
      for (size_t i = 0; i < m; ++i) acc[i] /= static_cast<float>(divisor);
    for (size_t i = 0; i < m; ++i) out[base + i] = BFloat16::from_float(acc[i]);
  }
}

}  // namespace

void reduce_inputs(void* out, const void* const* in, int n_in, size_t count, DType dtype, ReduceOp op,
                   int divisor, void* copy_to) {
  if (count == 0) return;
  if (copy_to) {
    // 16 KiB blocks: reduce one, copy it while it sits in L1.
    const size_t es = dtype_size(dtype);
    const size_t block = (16 << 10) / es;
    std::vector<const void*> shifted(static_cast<size_t>(n_in));
    for (size_t b = 0; b < count; b += block) {
      const size_t m = std::min(block, count - b);
      for (int k = 0; k < n_in; ++k) shifted[k] = static_cast<const char*>(in[k]) + b * es;
      reduce_inputs(static_cast<char*>(out) + b * es, shifted.data(), n_in, m, dtype, op, divisor);
      std::memcpy(static_cast<char*>(copy_to) + b * es, static_cast<char*>(out) + b * es, m * es);
    }
    return;
  }
  switch (dtype) {
    case DType::F32:
      return reduce_op(static_cast<float*>(out), in, n_in, count, op, divisor);
    case DType::F64:
      return reduce_op(static_cast<double*>(out), in, n_in, count, op, divisor);
    case DType::I32:
      return reduce_op(static_cast<int32_t*>(out), in, n_in, count, op, divisor);
    case DType::I64:
      return reduce_op(static_cast<int64_t*>(out), in, n_in, count, op, divisor);
    case DType::BF16:
      return reduce_bf16(static_cast<BFloat16*>(out), in, n_in, count, op, divisor);
    case DType::U8:
      break;
  }
  DDP_FAIL("shm: no reduction for dtype ", dtype_name(dtype),
           ": expected float32, float64, bfloat16, int32 or int64");
}

void reduce_to_all(void* const* outs, int n_out, const void* const* in, int n_in, size_t count, DType dtype,
                   ReduceOp op, int divisor) {
  if (count == 0) return;
  // 16 KiB blocks: reduced into scratch (it stays in L1), then stored to every destination.
  constexpr size_t kBlockBytes = 16 << 10;
  alignas(64) static thread_local char scratch[kBlockBytes];
  const size_t es = dtype_size(dtype);
  const size_t block = kBlockBytes / es;
  std::vector<const void*> shifted(static_cast<size_t>(n_in));
  for (size_t b = 0; b < count; b += block) {
    const size_t m = std::min(block, count - b);
    for (int k = 0; k < n_in; ++k) shifted[k] = static_cast<const char*>(in[k]) + b * es;
    reduce_inputs(scratch, shifted.data(), n_in, m, dtype, op, divisor);
    for (int k = 0; k < n_out; ++k) std::memcpy(static_cast<char*>(outs[k]) + b * es, scratch, m * es);
  }
}

}  // namespace ddp::dist::shm
