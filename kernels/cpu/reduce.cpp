// reduce.cpp - the CPU reduction kernels: short block sums in the input type folded into double
// accumulators. The column sums (sum over the middle dimension, e.g. a bias gradient summed over rows) are
// vectorized with Google Highway (compiled per instruction set, chosen at run time) and split across the
// thread budget in fixed row super-blocks (or by columns), so every column's summation order is the same for
// any thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/reduce.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"

#ifndef DDP_KERNELS_CPU_REDUCE_TILE_
#define DDP_KERNELS_CPU_REDUCE_TILE_  // foreach_target includes this file once per target
namespace ddp::kernels::cpu {
// The widest partial row ColumnBlockSum keeps (the column tile of column_sums below): 1024 columns, so a
// linear layer's bias gradient up to 1024 wide reads whole rows (a tile of 512 read each 4 KiB row as two
// 2 KiB halves, 256 rows apart: 0.64-0.70 of copy at 16M floats, against 0.73-0.84 for whole rows read
// eight at a time; docs/benchmarks.md, "CPU kernels against copy bandwidth").
constexpr int64_t kColumnTile = 1024;
}  // namespace ddp::kernels::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
// acc[j] (double, w <= kColumnTile columns) += sum of rows k0..k1 of x (row stride `stride`) at columns
// 0..w-1: four rows at a time added in the input type into a per-block partial row ((r0 + r1) + (r2 + r3),
// row-major, so every access streams), the partial converted to double once per block. Two such groups run
// in one pass over the partial row (part + g0, then + g1: the same additions in the same order as two
// passes; eight rows streaming at once keep more of memory's lines in flight). Plain loops compiled per
// instruction set: the compiler vectorizes them with AVX-512 / AVX2 (float adds are not reassociated, so
// every target gives the same bits).
template <class In>
void ColumnBlockSum(const In* x, int64_t stride, int64_t k0, int64_t k1, int64_t w, double* acc) {
  In part[kColumnTile];
  for (int64_t j = 0; j < w; ++j) part[j] = In(0);
  int64_t k = k0;
  for (; k + 8 <= k1; k += 8) {
    const In* __restrict r0 = x + k * stride;
    const In* __restrict r1 = r0 + stride;
    const In* __restrict r2 = r1 + stride;
    const In* __restrict r3 = r2 + stride;
    const In* __restrict r4 = r3 + stride;
    const In* __restrict r5 = r4 + stride;
    const In* __restrict r6 = r5 + stride;
    const In* __restrict r7 = r6 + stride;
    for (int64_t j = 0; j < w; ++j)
      part[j] = (part[j] + ((r0[j] + r1[j]) + (r2[j] + r3[j]))) + ((r4[j] + r5[j]) + (r6[j] + r7[j]));
  }
  for (; k + 4 <= k1; k += 4) {
    const In* __restrict r0 = x + k * stride;
    const In* __restrict r1 = r0 + stride;
    const In* __restrict r2 = r1 + stride;
    const In* __restrict r3 = r2 + stride;
    for (int64_t j = 0; j < w; ++j) part[j] += (r0[j] + r1[j]) + (r2[j] + r3[j]);
  }
  for (; k < k1; ++k) {
    const In* __restrict row = x + k * stride;
    for (int64_t j = 0; j < w; ++j) part[j] += row[j];
  }
  for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<double>(part[j]);
}
void ColumnBlockSumF32(const float* x, int64_t s, int64_t k0, int64_t k1, int64_t w, double* acc) {
  ColumnBlockSum(x, s, k0, k1, w, acc);
}
void ColumnBlockSumF64(const double* x, int64_t s, int64_t k0, int64_t k1, int64_t w, double* acc) {
  ColumnBlockSum(x, s, k0, k1, w, acc);
}
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(ColumnBlockSumF32);
HWY_EXPORT(ColumnBlockSumF64);

std::vector<DimGroup> group_dims(const Dims& shape, const std::vector<bool>& reduced) {
  std::vector<DimGroup> groups;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[d]) {
      groups.back().size *= shape[d];
    } else {
      groups.push_back({shape[d], static_cast<bool>(reduced[d])});
    }
  }
  return groups;
}

namespace {
// Partial sums run in the input type over short blocks (16 rows, or 16 values per lane), and
// the block sums are added in double: the precision of a double accumulator at close to the speed of a float
// one (the float -> double conversion is paid once per block, not once per element). The relative error of
// a float sum is then at most ~16 float epsilons (~1e-6), whatever the length (a plain float accumulator
// over 1e6 values is off by ~1%).
constexpr int64_t kBlockRows = 16;
constexpr int64_t kBlockLen = 128;

// Sum of n contiguous values: 8 independent lanes per block.
template <class In>
double sum_contiguous(const In* x, int64_t n) {
  double total = 0;
  int64_t i = 0;
  for (; i + kBlockLen <= n; i += kBlockLen) {
    In lane[8] = {};
    for (int64_t k = 0; k < kBlockLen; k += 8)
      for (int l = 0; l < 8; ++l) lane[l] += x[i + k + l];
    total += (static_cast<double>(lane[0]) + lane[1] + lane[2] + lane[3]) +
             (static_cast<double>(lane[4]) + lane[5] + lane[6] + lane[7]);
  }
  for (; i < n; ++i) total += static_cast<double>(x[i]);
  return total;
}
}  // namespace

// Column sums (inner > 1): rows are taken in fixed super-blocks (kSuperRows rows, more for very tall inputs
// so there are at most kMaxSuperBlocks), each summed into its own double partial row (blocks of kBlockRows
// rows added in the input type, then into double, in row order), and the partial rows added in super-block
// order. The super-blocks depend on the shape only, so any thread count gives the same bits. Threads split
// the super-blocks, each reading whole rows (contiguous memory). A single super-block (r <= kSuperRows), or
// partial rows that would take more than kMaxScratch doubles, are split by columns instead (tiles of kTile
// columns). The partial rows live in a reused per-thread buffer (at most kMaxScratch doubles). Zero rows
// (an empty batch) write 0 * scale to every column without touching the buffer.
constexpr int64_t kSuperRows = 256;
constexpr int64_t kMaxSuperBlocks = 64;
constexpr int64_t kTile = kColumnTile;             // ColumnBlockSum's widest partial row
constexpr int64_t kMaxScratch = int64_t(1) << 20;  // doubles of partial rows (8 MiB)

template <class In>
void column_block_sum(const In* x, int64_t stride, int64_t k0, int64_t k1, int64_t w, double* acc) {
  if constexpr (sizeof(In) == 4)
    HWY_DYNAMIC_DISPATCH(ColumnBlockSumF32)(x, stride, k0, k1, w, acc);
  else
    HWY_DYNAMIC_DISPATCH(ColumnBlockSumF64)(x, stride, k0, k1, w, acc);
}

// acc[0..c1-c0) (zeroed here) = sums of rows k0..k1 of x at columns c0..c1 (row stride inner).
template <class In>
void column_sums(const In* x, int64_t inner, int64_t k0, int64_t k1, int64_t c0, int64_t c1, double* acc) {
  std::fill(acc, acc + (c1 - c0), 0.0);
  for (int64_t j0 = c0; j0 < c1; j0 += kTile)
    for (int64_t b0 = k0; b0 < k1; b0 += kBlockRows)
      column_block_sum(x + j0, inner, b0, std::min(k1, b0 + kBlockRows), std::min(kTile, c1 - j0),
                       acc + (j0 - c0));
}

template <class In, class Out>
void sum_middle(const In* x, int64_t outer, int64_t r, int64_t inner, Out* out, double scale) {
  if (r == 0) {  // a sum over nothing: 0 (times the scale: the mean of nothing is NaN); x is not read
    std::fill(out, out + outer * inner, static_cast<Out>(0.0 * scale));
    return;
  }
  if (inner == 1) {
    for (int64_t o = 0; o < outer; ++o) out[o] = static_cast<Out>(sum_contiguous(x + o * r, r) * scale);
    return;
  }
  int64_t super = kSuperRows;
  while ((r + super - 1) / super > kMaxSuperBlocks) super *= 2;
  const int64_t supers = (r + super - 1) / super;
  thread_local std::vector<double> scratch;  // reused: a steady training step allocates nothing here
  for (int64_t o = 0; o < outer; ++o) {
    const In* xo = x + o * r * inner;
    Out* dst = out + o * inner;
    if (supers == 1 || supers * inner > kMaxScratch) {  // columns split across the thread budget
      parallel_for(inner, 16, std::max<int64_t>(16, kParallelMinStreaming / std::max<int64_t>(r, 1)),
                   [&](int64_t c0, int64_t c1) {
                     double acc[kTile];
                     for (int64_t j0 = c0; j0 < c1; j0 += kTile) {
                       const int64_t w = std::min(kTile, c1 - j0);
                       column_sums(xo, inner, 0, r, j0, j0 + w, acc);
                       for (int64_t j = 0; j < w; ++j) dst[j0 + j] = static_cast<Out>(acc[j] * scale);
                     }
                   });
      continue;
    }
    const size_t need = static_cast<size_t>(supers * inner);
    if (scratch.size() < need) scratch.resize(need);
    double* part = scratch.data();
    parallel_for(supers, 1, std::max<int64_t>(1, kParallelMinStreaming / std::max<int64_t>(super * inner, 1)),
                 [&](int64_t s0, int64_t s1) {
                   for (int64_t sb = s0; sb < s1; ++sb)
                     column_sums(xo, inner, sb * super, std::min(r, (sb + 1) * super), 0, inner,
                                 part + sb * inner);
                 });
    for (int64_t sb = 1; sb < supers; ++sb)  // per column: super-blocks added in order
      for (int64_t j = 0; j < inner; ++j) part[j] += part[sb * inner + j];
    for (int64_t j = 0; j < inner; ++j) dst[j] = static_cast<Out>(part[j] * scale);
  }
}

template <class T>
void sum_dims(const T* x, const Dims& shape, const std::vector<bool>& reduced, T* out, double scale) {
  std::vector<DimGroup> groups = group_dims(shape, reduced);
  int num_reduced = 0;
  int64_t total = 1;
  for (const DimGroup& g : groups) {
    num_reduced += g.reduced ? 1 : 0;
    total *= g.size;
  }
  if (num_reduced == 0) {  // nothing to sum (only size-1 dimensions reduced)
    for (int64_t i = 0; i < total; ++i) out[i] = static_cast<T>(x[i] * scale);
    return;
  }
  // Reduce the innermost reduced run first; intermediate results stay in double.
  std::vector<double> cur, next;
  bool from_input = true;
  while (true) {
    int last = static_cast<int>(groups.size()) - 1;
    while (!groups[last].reduced) --last;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < last; ++i) outer *= groups[i].size;
    for (int i = last + 1; i < static_cast<int>(groups.size()); ++i) inner *= groups[i].size;
    const int64_t r = groups[last].size;
    groups.erase(groups.begin() + last);
    --num_reduced;
    const bool final_pass = num_reduced == 0;
    if (final_pass) {
      if (from_input)
        sum_middle(x, outer, r, inner, out, scale);
      else
        sum_middle(cur.data(), outer, r, inner, out, scale);
      return;
    }
    next.assign(static_cast<size_t>(outer * inner), 0.0);
    if (from_input)
      sum_middle(x, outer, r, inner, next.data(), 1.0);
    else
      sum_middle(cur.data(), outer, r, inner, next.data(), 1.0);
    cur.swap(next);
    from_input = false;
  }
}

template <class T>
void expand_dims(const T* g, const Dims& shape, const std::vector<bool>& reduced, T* out, double scale) {
  const std::vector<DimGroup> groups = group_dims(shape, reduced);
  const T s = static_cast<T>(scale);
  if (groups.empty()) {  // one element
    out[0] = g[0] * s;
    return;
  }
  const int ng = static_cast<int>(groups.size());
  // Stride of each group in g (0 along reduced groups).
  std::vector<int64_t> gstride(ng, 0);
  int64_t st = 1;
  for (int i = ng - 1; i >= 0; --i) {
    if (!groups[i].reduced) {
      gstride[i] = st;
      st *= groups[i].size;
    }
  }
  const int64_t last = groups[ng - 1].size;
  const bool last_reduced = groups[ng - 1].reduced;
  int64_t rows = 1;
  for (int i = 0; i < ng - 1; ++i) rows *= groups[i].size;
  std::vector<int64_t> idx(ng, 0);
  int64_t goff = 0;
  for (int64_t row = 0; row < rows; ++row) {
    T* dst = out + row * last;
    if (last_reduced) {
      const T v = g[goff] * s;
      for (int64_t j = 0; j < last; ++j) dst[j] = v;
    } else {
      const T* src = g + goff;
      for (int64_t j = 0; j < last; ++j) dst[j] = src[j] * s;
    }
    for (int d = ng - 2; d >= 0; --d) {  // odometer over the outer groups
      goff += gstride[d];
      if (++idx[d] < groups[d].size) break;
      goff -= gstride[d] * groups[d].size;
      idx[d] = 0;
    }
  }
}

template void sum_middle<float, float>(const float*, int64_t, int64_t, int64_t, float*, double);
template void sum_middle<double, double>(const double*, int64_t, int64_t, int64_t, double*, double);
template void sum_middle<float, double>(const float*, int64_t, int64_t, int64_t, double*, double);
template void sum_middle<double, float>(const double*, int64_t, int64_t, int64_t, float*, double);
template void sum_dims<float>(const float*, const Dims&, const std::vector<bool>&, float*, double);
template void sum_dims<double>(const double*, const Dims&, const std::vector<bool>&, double*, double);
template void expand_dims<float>(const float*, const Dims&, const std::vector<bool>&, float*, double);
template void expand_dims<double>(const double*, const Dims&, const std::vector<bool>&, double*, double);

}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE
