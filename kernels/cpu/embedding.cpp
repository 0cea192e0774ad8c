// embedding.cpp - CPU embedding gather and scatter-add. The scatter-add is plain C++ compiled once per
// instruction set through Highway's foreach_target (the compiler vectorizes the row adds with AVX-512 / AVX2)
// and HWY_DYNAMIC_DISPATCH picks the build for this CPU. Both are split across the thread budget: the gather
// by rows, the scatter-add by columns, each column range walking all indices in order, so repeated indices
// sum in the same order for any thread count (deterministic).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/embedding.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/index_check.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
// dweight[indices[i], c0:c1] += dout[i, c0:c1] for every i in order (dweight already zeroed there).
template <class T>
void ScatterAddColumns(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t cols, int64_t c0,
                       int64_t c1) {
  for (int64_t i = 0; i < n; ++i) {
    T* __restrict dst = dweight + indices[i] * cols;
    const T* __restrict src = dout + i * cols;
    for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
  }
}
}  // namespace
void ScatterAddColumnsF32(const float* dout, const int64_t* idx, float* dw, int64_t n, int64_t cols,
                          int64_t c0, int64_t c1) {
  ScatterAddColumns(dout, idx, dw, n, cols, c0, c1);
}
void ScatterAddColumnsF64(const double* dout, const int64_t* idx, double* dw, int64_t n, int64_t cols,
                          int64_t c0, int64_t c1) {
  ScatterAddColumns(dout, idx, dw, n, cols, c0, c1);
}
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(ScatterAddColumnsF32);
HWY_EXPORT(ScatterAddColumnsF64);

int64_t first_bad_index(const int64_t* indices, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (!index_in_range(indices[i], vocab)) return i;
  return -1;
}

template <class T>
void embedding_forward(const T* weight, const int64_t* indices, T* out, int64_t n, int64_t cols) {
  const int64_t min_rows = std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(cols, 1));
  parallel_for(n, 1, min_rows, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memcpy(out + i * cols, weight + indices[i] * cols, static_cast<size_t>(cols) * sizeof(T));
  });
}

template <class T>
void embedding_backward(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t vocab,
                        int64_t cols) {
  std::memset(dweight, 0, static_cast<size_t>(vocab * cols) * sizeof(T));
  const int64_t min_cols = std::max<int64_t>(16, kParallelMinElements / std::max<int64_t>(n, 1));
  parallel_for(cols, 16, min_cols, [&](int64_t c0, int64_t c1) {
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(ScatterAddColumnsF32)(dout, indices, dweight, n, cols, c0, c1);
    else
      HWY_DYNAMIC_DISPATCH(ScatterAddColumnsF64)(dout, indices, dweight, n, cols, c0, c1);
  });
}

template void embedding_forward<float>(const float*, const int64_t*, float*, int64_t, int64_t);
template void embedding_forward<double>(const double*, const int64_t*, double*, int64_t, int64_t);
template void embedding_backward<float>(const float*, const int64_t*, float*, int64_t, int64_t, int64_t);
template void embedding_backward<double>(const double*, const int64_t*, double*, int64_t, int64_t, int64_t);

}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE
