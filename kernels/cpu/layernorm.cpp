// layernorm.cpp - CPU layer norm forward (two-pass mean/variance per row) and backward (row sums, then dx and
// the dweight / dbias rows, per L1-sized sub-block of rows), vectorized with Google Highway (compiled per
// instruction set, chosen at run time), rows split across the thread budget.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/layernorm.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <cstdint>
#include <vector>

#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
// Three passes over each row, nothing stored in between: the mean, the centred sum of squares, then
// y = (x - mean) * rstd * weight + bias. float32 on AVX-512: 16 rows at a time, each pass over all 16 rows
// (16 rows of up to ~700 floats stay in L1), their 16 horizontal sums one TransposeReduce16 per pass (the
// rows' sums no longer wait on each other's horizontal reductions).
template <class T>
void LayerNormForward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                      int64_t cols, double eps) {
  const hn::ScalableTag<T> d;
  const T inv_cols = T(1) / static_cast<T>(cols);
  auto finish_row = [&](int64_t r, T m, T var) HWY_ATTR {
    const T rs = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var) + eps));
    const auto vm = hn::Set(d, m), vrs = hn::Set(d, rs);
    MapTernary(d, x + r * cols, weight, bias, y + r * cols, cols,
               [vm, vrs](auto, auto v, auto w, auto b)
                   HWY_ATTR { return hn::MulAdd(hn::Mul(hn::Sub(v, vm), vrs), w, b); });
    mean[r] = m;
    rstd[r] = rs;
  };
#if DDP_SIMD_TRANSPOSE_REDUCE16
  if constexpr (sizeof(T) == 4) {
    if (hn::Lanes(d) == 16) {  // every row through the tree (a partial block padded): one summation order
      const auto add = [](__m512 p, __m512 q) { return _mm512_add_ps(p, q); };
      const __m512 vinv = _mm512_set1_ps(inv_cols);
      for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        const int64_t nb = std::min<int64_t>(16, rows - r0);
        __m512 lanes[16];
        alignas(64) float m[16], var[16];
        for (int64_t k = 0; k < 16; ++k)
          lanes[k] = k < nb ? RowSumLanes(x + (r0 + k) * cols, cols).raw : _mm512_setzero_ps();
        _mm512_store_ps(m, _mm512_mul_ps(TransposeReduce16(lanes, add), vinv));
        for (int64_t k = 0; k < 16; ++k)
          lanes[k] =
              k < nb ? RowCentredSquaresLanes(x + (r0 + k) * cols, cols, m[k]).raw : _mm512_setzero_ps();
        _mm512_store_ps(var, _mm512_mul_ps(TransposeReduce16(lanes, add), vinv));
        // the next block's rows, fetched while this block's outputs are written (at 16M the rows come from
        // memory; measured 0.77 -> 0.81 of the copy bandwidth, still below the one-row-at-a-time loop's 0.93,
        // while at 1M, from L3, the blocks gain: 0.51 -> 0.56)
        const float* next = x + (r0 + 16) * cols;
        const int64_t next_floats = std::min<int64_t>(16, rows - r0 - 16) * cols;
        for (int64_t k = 0; k < nb; ++k) {
          for (int64_t i = k * next_floats / 16; i < (k + 1) * next_floats / 16; i += 16)
            __builtin_prefetch(next + i, 0, 3);
          finish_row(r0 + k, m[k], var[k]);
        }
      }
      return;
    }
  }
#endif
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T m = RowSum(xr, cols) * inv_cols;
    finish_row(r, m, ReduceSum(d, RowCentredSquaresLanes(xr, cols, m)) * inv_cols);
  }
}

// Backward over a block of rows, in sub-blocks of kSubRows rows whose x and dy stay in L1 between two passes:
//  A: per row, the two row sums sum(g) and sum(g (x - mean)) with g = dy * weight (two accumulators each, and
//     the rows of a sub-block independent, so the adds do not wait on each other), turned into the row's
//     coefficients of dx = rstd g - rstd mean(g) - (rstd mean(g xhat)) xhat;
//  B: column vector by column vector, down the sub-block's rows: dx, and the dweight / dbias sums kept in
//     registers (even and odd rows in two accumulators, added at the end of the sub-block), so they are
//     loaded and stored once per sub-block instead of carrying a store-to-load chain from row to row.
// The order of the additions is fixed by the block (never by the thread count). While B runs, the lines
// kSubRows rows on are prefetched (x, dy to read, dx to write), so the next pass A does not wait on memory.
// dweight / dbias (may be null) are this block's own partial rows, zeroed here.
constexpr int64_t kSubRows = 12;

// A read prefetch `elems` elements past p, computed as an address (it may lie past the array: a prefetch
// never faults, but pointer arithmetic past the end would be undefined).
template <class T>
inline void PrefetchAhead(const T* p, int64_t elems) {
  __builtin_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) +
                                                   static_cast<uintptr_t>(elems) * sizeof(T)));
}

template <class T>
void LayerNormBackward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                       T* dweight, T* dbias, int64_t rows, int64_t cols) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  if (dweight)
    for (int64_t c = 0; c < cols; ++c) dweight[c] = T(0);
  if (dbias)
    for (int64_t c = 0; c < cols; ++c) dbias[c] = T(0);
  const T inv_cols = T(1) / static_cast<T>(cols);
  const int64_t full = cols - cols % N, rest = cols - full;
  // Per row of the sub-block: mean, rstd, -rstd mean(g), rstd mean(g xhat).
  T cm[kSubRows] = {}, crs[kSubRows] = {}, cb[kSubRows] = {}, cc[kSubRows] = {};
  for (int64_t r0 = 0; r0 < rows; r0 += kSubRows) {
    const int64_t nr = std::min(kSubRows, rows - r0);
    for (int64_t k = 0; k < nr; ++k) {  // pass A (only dx needs the row sums)
      const T* xr = x + (r0 + k) * cols;
      const T* dyr = dy + (r0 + k) * cols;
      const T m = mean[r0 + k], rs = rstd[r0 + k];
      cm[k] = m;
      crs[k] = rs;
      // This row of the sub-block after next, into L1: pass A's first loads of each row waited on memory
      // (45% of the kernel's samples at 16M rows x 128, perf, 2026-12-04), pass B's prefetch of the next
      // sub-block alone came too late. Rows past the end are only prefetched (never faults).
      for (int64_t c = 0; c < cols; c += 64 / static_cast<int64_t>(sizeof(T))) {
        PrefetchAhead(xr, 2 * kSubRows * cols + c);
        PrefetchAhead(dyr, 2 * kSubRows * cols + c);
      }
      if (!dx) continue;
      const auto vm = hn::Set(d, m);
      auto s0 = hn::Zero(d), s1 = hn::Zero(d), c0 = hn::Zero(d), c1 = hn::Zero(d);
      int64_t i = 0;
      for (; i + 2 * N <= full; i += 2 * N) {
        const auto g0 = hn::Mul(hn::LoadU(d, dyr + i), hn::LoadU(d, weight + i));
        const auto g1 = hn::Mul(hn::LoadU(d, dyr + i + N), hn::LoadU(d, weight + i + N));
        s0 = hn::Add(s0, g0);
        s1 = hn::Add(s1, g1);
        c0 = hn::MulAdd(g0, hn::Sub(hn::LoadU(d, xr + i), vm), c0);
        c1 = hn::MulAdd(g1, hn::Sub(hn::LoadU(d, xr + i + N), vm), c1);
      }
      if (i < full) {
        const auto g = hn::Mul(hn::LoadU(d, dyr + i), hn::LoadU(d, weight + i));
        s0 = hn::Add(s0, g);
        c0 = hn::MulAdd(g, hn::Sub(hn::LoadU(d, xr + i), vm), c0);
      }
      if (rest) {  // padding: dy = 0, weight = 0, x = mean add nothing
        const auto g = hn::Mul(LoadTail(d, dyr + full, rest, T(0)), LoadTail(d, weight + full, rest, T(0)));
        s1 = hn::Add(s1, g);
        c1 = hn::MulAdd(g, hn::Sub(LoadTail(d, xr + full, rest, m), vm), c1);
      }
      const T mg = ReduceSum(d, hn::Add(s0, s1)) * inv_cols;
      const T mgx = ReduceSum(d, hn::Add(c0, c1)) * rs * inv_cols;  // mean(g xhat)
      cb[k] = -rs * mg;
      cc[k] = rs * mgx;
    }
    // Pass B.
    const bool prefetch = true;  // also past this call's rows: the next block's (a prefetch never faults)
    const T* xs = x + r0 * cols;
    const T* dys = dy + r0 * cols;
    T* dxs = dx ? dx + r0 * cols : nullptr;
    auto column = [&](int64_t i, int64_t count) HWY_ATTR {
      const bool whole = count == N;
      const V vw = whole ? hn::LoadU(d, weight + i) : LoadTail(d, weight + i, count, T(0));
      V dw0 = hn::Zero(d), dw1 = hn::Zero(d), db0 = hn::Zero(d), db1 = hn::Zero(d);
      auto row = [&](int64_t k, V& vdw, V& vdb) HWY_ATTR {
        const T* xr = xs + k * cols + i;
        const T* dyr = dys + k * cols + i;
        const V vx = whole ? hn::LoadU(d, xr) : LoadTail(d, xr, count, cm[k]);  // padding: xhat 0
        const V vdy = whole ? hn::LoadU(d, dyr) : LoadTail(d, dyr, count, T(0));
        if (prefetch) {
          PrefetchAhead(xr, kSubRows * cols);
          PrefetchAhead(dyr, kSubRows * cols);
          if (dxs) __builtin_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(dxs) +
                                                                    ((k + kSubRows) * cols + i) * sizeof(T)),
                                      1);
        }
        const V vrs = hn::Set(d, crs[k]);
        const V xh = hn::Mul(hn::Sub(vx, hn::Set(d, cm[k])), vrs);
        if (dxs) {
          const V v =
              hn::NegMulAdd(hn::Set(d, cc[k]), xh, hn::MulAdd(vrs, hn::Mul(vdy, vw), hn::Set(d, cb[k])));
          if (whole)
            hn::StoreU(v, d, dxs + k * cols + i);
          else
            StoreTail(d, v, dxs + k * cols + i, count);
        }
        vdw = hn::MulAdd(vdy, xh, vdw);
        vdb = hn::Add(vdb, vdy);
      };
      int64_t k = 0;
      for (; k + 2 <= nr; k += 2) {
        row(k, dw0, db0);
        row(k + 1, dw1, db1);
      }
      if (k < nr) row(k, dw0, db0);
      if (dweight) {
        const V v = hn::Add(whole ? hn::LoadU(d, dweight + i) : LoadTail(d, dweight + i, count, T(0)),
                            hn::Add(dw0, dw1));
        whole ? hn::StoreU(v, d, dweight + i) : StoreTail(d, v, dweight + i, count);
      }
      if (dbias) {
        const V v =
            hn::Add(whole ? hn::LoadU(d, dbias + i) : LoadTail(d, dbias + i, count, T(0)), hn::Add(db0, db1));
        whole ? hn::StoreU(v, d, dbias + i) : StoreTail(d, v, dbias + i, count);
      }
    };
    for (int64_t i = 0; i < full; i += N) column(i, N);
    if (rest) column(full, rest);
  }
}
}  // namespace

void LayerNormForwardF32(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t rows, int64_t cols, double eps) {
  LayerNormForward(x, w, b, y, mean, rstd, rows, cols, eps);
}
void LayerNormForwardF64(const double* x, const double* w, const double* b, double* y, double* mean,
                         double* rstd, int64_t rows, int64_t cols, double eps) {
  LayerNormForward(x, w, b, y, mean, rstd, rows, cols, eps);
}
void LayerNormBackwardF32(const float* dy, const float* x, const float* w, const float* mean,
                          const float* rstd, float* dx, float* dw, float* db, int64_t rows, int64_t cols) {
  LayerNormBackward(dy, x, w, mean, rstd, dx, dw, db, rows, cols);
}
void LayerNormBackwardF64(const double* dy, const double* x, const double* w, const double* mean,
                          const double* rstd, double* dx, double* dw, double* db, int64_t rows,
                          int64_t cols) {
  LayerNormBackward(dy, x, w, mean, rstd, dx, dw, db, rows, cols);
}

}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(LayerNormForwardF32);
HWY_EXPORT(LayerNormForwardF64);
HWY_EXPORT(LayerNormBackwardF32);
HWY_EXPORT(LayerNormBackwardF64);

template <class T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                       int64_t cols, double eps) {
  const int64_t min_rows = std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(cols, 1));
  parallel_for(rows, 1, min_rows, [&](int64_t b, int64_t e) {
    const int64_t o = b * cols;
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(LayerNormForwardF32)
      (x + o, weight, bias, y + o, mean + b, rstd + b, e - b, cols, eps);
    else
      HWY_DYNAMIC_DISPATCH(LayerNormForwardF64)
      (x + o, weight, bias, y + o, mean + b, rstd + b, e - b, cols, eps);
  });
}
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                        T* dweight, T* dbias, int64_t rows, int64_t cols) {
  // dweight and dbias sum over rows: per block of kBlockRows rows (a fixed split, whatever the thread
  // count) into its own partial row, then the partials are added in block order in double. The partial rows
  // live in a per-thread scratch buffer that is reused, so a steady training step allocates (and page-faults)
  // nothing here.
  constexpr int64_t kBlockRows = 64;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const bool partials = (dweight || dbias) && blocks > 1;
  thread_local std::vector<T> scratch;
  thread_local std::vector<double> acc;
  T* pw = nullptr;
  T* pb = nullptr;
  if (partials) {
    const size_t per = static_cast<size_t>(blocks * cols);
    if (scratch.size() < 2 * per) scratch.resize(2 * per);
    pw = scratch.data();
    pb = scratch.data() + per;
  }
  const int64_t min_blocks =
      std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(kBlockRows * cols, 1));
  parallel_for(blocks, 1, min_blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * kBlockRows, n = std::min(rows, r0 + kBlockRows) - r0, o = r0 * cols;
      T* dw = !dweight ? nullptr : partials ? pw + blk * cols : dweight;
      T* db = !dbias ? nullptr : partials ? pb + blk * cols : dbias;
      if constexpr (sizeof(T) == 4)
        HWY_DYNAMIC_DISPATCH(LayerNormBackwardF32)
        (dy + o, x + o, weight, mean + r0, rstd + r0, dx ? dx + o : nullptr, dw, db, n, cols);
      else
        HWY_DYNAMIC_DISPATCH(LayerNormBackwardF64)
        (dy + o, x + o, weight, mean + r0, rstd + r0, dx ? dx + o : nullptr, dw, db, n, cols);
    }
  });
  if (!partials) return;
  acc.resize(static_cast<size_t>(cols));
  for (auto [out, part] : {std::pair<T*, const T*>{dweight, pw}, {dbias, pb}}) {
    if (!out) continue;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t blk = 0; blk < blocks; ++blk)  // per column: blocks added in order
      for (int64_t c = 0; c < cols; ++c) acc[c] += static_cast<double>(part[blk * cols + c]);
    for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(acc[c]);
  }
}

template void layernorm_forward<float>(const float*, const float*, const float*, float*, float*, float*,
                                       int64_t, int64_t, double);
template void layernorm_forward<double>(const double*, const double*, const double*, double*, double*,
                                        double*, int64_t, int64_t, double);
template void layernorm_backward<float>(const float*, const float*, const float*, const float*, const float*,
                                        float*, float*, float*, int64_t, int64_t);
template void layernorm_backward<double>(const double*, const double*, const double*, const double*,
                                         const double*, double*, double*, double*, int64_t, int64_t);
}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE
