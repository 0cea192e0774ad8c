// broadcast.h - NumPy-style broadcasting of two shapes and an index walker over the broadcast result,
// shared by the CPU kernels of binary elementwise ops and by their backward reductions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/reduce.h"

namespace ddp::kernels::cpu {

using Dims = std::vector<int64_t>;

// The broadcast shape of a and b; ok=false when they are incompatible.
Dims broadcast_shapes(const Dims& a, const Dims& b, bool* ok);
// Element strides of `in` when read as `out` (0 along broadcast dimensions). in has <= out.size() dims.
Dims broadcast_strides(const Dims& in, const Dims& out);

// The element count of `in` when it is `out` with only leading dimensions broadcast (in, without its leading
// 1s, equals a suffix of out: a bias (C) against (B, T, C), a (T, C) table against (B, T, C)); 0 otherwise.
inline int64_t trailing_block(const Dims& in, const Dims& out) {
  size_t first = 0;
  while (first < in.size() && in[first] == 1) ++first;
  const size_t k = in.size() - first;
  if (k > out.size()) return 0;
  int64_t n = 1;
  for (size_t i = 0; i < k; ++i) {
    if (in[first + i] != out[out.size() - k + i]) return 0;
    n *= in[first + i];
  }
  return n;
}

// out[i] = f(a[ia], b[ib]) over the broadcast shape.
template <class T, class F>
void binary_broadcast(const T* a, const Dims& ash, const T* b, const Dims& bsh, T* out, const Dims& osh,
                      F f) {
  int64_t n = 1;
  for (int64_t d : osh) n *= d;
  if (ash == osh && bsh == osh) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
    return;
  }
  // One operand full, the other repeated along leading dimensions: contiguous inner loops (vectorizable).
  if (int64_t inner = ash == osh ? trailing_block(bsh, osh) : 0; inner > 0) {
    for (int64_t o = 0; o < n; o += inner)
      for (int64_t i = 0; i < inner; ++i) out[o + i] = f(a[o + i], b[i]);
    return;
  }
  if (int64_t inner = bsh == osh ? trailing_block(ash, osh) : 0; inner > 0) {
    for (int64_t o = 0; o < n; o += inner)
      for (int64_t i = 0; i < inner; ++i) out[o + i] = f(a[i], b[o + i]);
    return;
  }
  const Dims sa = broadcast_strides(ash, osh), sb = broadcast_strides(bsh, osh);
  const int nd = static_cast<int>(osh.size());
  std::vector<int64_t> idx(nd, 0);
  int64_t ia = 0, ib = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = f(a[ia], b[ib]);
    for (int d = nd - 1; d >= 0; --d) {  // odometer increment
      ++idx[d];
      ia += sa[d];
      ib += sb[d];
      if (idx[d] < osh[d]) break;
      ia -= sa[d] * osh[d];
      ib -= sb[d] * osh[d];
      idx[d] = 0;
    }
  }
}

// out (shape osh, a broadcastable-to-gsh shape) = sum of g (shape gsh) over the broadcast dimensions.
template <class T>
void sum_to_shape(const T* g, const Dims& gsh, T* out, const Dims& osh) {
  int64_t n = 1, m = 1;
  for (int64_t d : gsh) n *= d;
  for (int64_t d : osh) m *= d;
  if (gsh == osh) {
    for (int64_t i = 0; i < n; ++i) out[i] = g[i];
    return;
  }
  for (int64_t i = 0; i < m; ++i) out[i] = T(0);
  // Summing over leading dimensions only (a bias gradient): the vectorized column sums of reduce.h (blocks
  // of rows in T, folded into double; split across the thread budget by columns).
  if (trailing_block(osh, gsh) == m && m > 0) {
    sum_middle(g, 1, n / m, m, out, 1.0);
    return;
  }
  const Dims so = broadcast_strides(osh, gsh);
  const int nd = static_cast<int>(gsh.size());
  std::vector<int64_t> idx(nd, 0);
  int64_t io = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[io] += g[i];
    for (int d = nd - 1; d >= 0; --d) {
      ++idx[d];
      io += so[d];
      if (idx[d] < gsh[d]) break;
      io -= so[d] * gsh[d];
      idx[d] = 0;
    }
  }
}

}  // namespace ddp::kernels::cpu
