// conv.cpp - CPU convolution kernels: im2col/col2im and the per-image GEMMs (OpenBLAS: gemm_ld_openblas)
// around them. A 1x1 convolution with stride 1 and no padding skips im2col: the image itself is the column
// matrix.
#include "kernels/cpu/conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace ddp::kernels::cpu {
namespace {

// The output columns [lo, hi) whose input column ow*stride + offset lies inside [0, width).
struct ValidRange {
  int64_t lo, hi;
};
ValidRange valid_outputs(int64_t offset, int64_t width, int64_t stride, int64_t out_size) {
  const int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t hi = width - offset <= 0 ? 0 : std::min(out_size, (width - offset - 1) / stride + 1);
  return {std::min(lo, out_size), std::max(std::min(lo, out_size), hi)};
}

bool is_pointwise(const ConvGeometry& g) {
  return g.kernel_h == 1 && g.kernel_w == 1 && g.stride == 1 && g.padding == 0;
}

}  // namespace

template <class T>
void im2col(const T* x, const ConvGeometry& g, T* col) {
  const int64_t H = g.in_h, W = g.in_w, Ho = g.out_h, Wo = g.out_w, s = g.stride, p = g.padding;
  for (int64_t c = 0; c < g.in_channels; ++c) {
    const T* plane = x + c * H * W;
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        T* row = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * Ho * Wo;
        const int64_t off_w = kj - p;
        const ValidRange r = valid_outputs(off_w, W, s, Wo);
        for (int64_t oh = 0; oh < Ho; ++oh) {
          T* out = row + oh * Wo;
          const int64_t ih = oh * s - p + ki;
          if (ih < 0 || ih >= H) {
            std::fill(out, out + Wo, T(0));
            continue;
          }
          const T* in = plane + ih * W;
          std::fill(out, out + r.lo, T(0));
          if (s == 1) {
            if (r.hi > r.lo) std::memcpy(out + r.lo, in + r.lo + off_w, sizeof(T) * (r.hi - r.lo));
          } else {
            for (int64_t ow = r.lo; ow < r.hi; ++ow) out[ow] = in[ow * s + off_w];
          }
          std::fill(out + r.hi, out + Wo, T(0));
        }
      }
    }
  }
}

template <class T>
void col2im_add(const T* col, const ConvGeometry& g, T* dx) {
  const int64_t H = g.in_h, W = g.in_w, Ho = g.out_h, Wo = g.out_w, s = g.stride, p = g.padding;
  for (int64_t c = 0; c < g.in_channels; ++c) {
    T* plane = dx + c * H * W;
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const T* row = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * Ho * Wo;
        const int64_t off_w = kj - p;
        const ValidRange r = valid_outputs(off_w, W, s, Wo);
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t ih = oh * s - p + ki;
          if (ih < 0 || ih >= H) continue;
          const T* in = row + oh * Wo;
          T* out = plane + ih * W;
          for (int64_t ow = r.lo; ow < r.hi; ++ow) out[ow * s + off_w] += in[ow];
        }
      }
    }
  }
}

template <class T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const ConvGeometry& g) {
  const int64_t K = g.col_rows(), L = g.out_pixels(), Cout = g.out_channels;
  const int64_t in_image = g.in_channels * g.in_h * g.in_w;
  const bool pointwise = is_pointwise(g);
  std::vector<T> col(pointwise ? 0 : static_cast<size_t>(K * L));
  for (int64_t n = 0; n < g.batch; ++n) {
    const T* xn = x + n * in_image;
    T* yn = y + n * Cout * L;
    const T* cols = xn;
    if (!pointwise) {
      im2col(xn, g, col.data());
      cols = col.data();
    }
    if (b)
      for (int64_t c = 0; c < Cout; ++c) std::fill(yn + c * L, yn + (c + 1) * L, b[c]);
    gemm_ld_openblas(false, false, Cout, L, K, T(1), w, K, cols, L, b ? T(1) : T(0), yn, L);
  }
}

template <class T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const ConvGeometry& g) {
  const int64_t K = g.col_rows(), L = g.out_pixels(), Cout = g.out_channels;
  const int64_t in_image = g.in_channels * g.in_h * g.in_w;
  const bool pointwise = is_pointwise(g);
  std::vector<T> col(pointwise ? 0 : static_cast<size_t>(K * L));
  if (dw) std::fill(dw, dw + Cout * K, T(0));
  std::vector<double> bias_sum(db ? Cout : 0, 0.0);  // accumulated in double: N*Ho*Wo terms per channel
  for (int64_t n = 0; n < g.batch; ++n) {
    const T* xn = x + n * in_image;
    const T* dyn = dy + n * Cout * L;
    if (dw) {  // dw (Cout, K) += dy_n (Cout, L) @ col_n^T (L, K)
      const T* cols = xn;
      if (!pointwise) {
        im2col(xn, g, col.data());
        cols = col.data();
      }
      gemm_ld_openblas(false, true, Cout, K, L, T(1), dyn, L, cols, L, T(1), dw, K);
    }
    if (dx) {  // dcol (K, L) = w^T (K, Cout) @ dy_n (Cout, L), scattered back by col2im
      T* dxn = dx + n * in_image;
      if (pointwise) {
        gemm_ld_openblas(true, false, K, L, Cout, T(1), w, K, dyn, L, T(0), dxn, L);
      } else {
        gemm_ld_openblas(true, false, K, L, Cout, T(1), w, K, dyn, L, T(0), col.data(), L);
        std::fill(dxn, dxn + in_image, T(0));
        col2im_add(col.data(), g, dxn);
      }
    }
    if (db) {
      for (int64_t c = 0; c < Cout; ++c) {
        const T* row = dyn + c * L;
        T acc = 0;
        for (int64_t i = 0; i < L; ++i) acc += row[i];
        bias_sum[c] += acc;
      }
    }
  }
  if (db)
    for (int64_t c = 0; c < Cout; ++c) db[c] = static_cast<T>(bias_sum[c]);
}

#define DDP_INSTANTIATE_CONV(T)                                                           \
  template void im2col<T>(const T*, const ConvGeometry&, T*);                             \
  template void col2im_add<T>(const T*, const ConvGeometry&, T*);                         \
  template void conv2d_forward<T>(const T*, const T*, const T*, T*, const ConvGeometry&); \
  template void conv2d_backward<T>(const T*, const T*, const T*, T*, T*, T*, const ConvGeometry&);
DDP_INSTANTIATE_CONV(float)
DDP_INSTANTIATE_CONV(double)
#undef DDP_INSTANTIATE_CONV

}  // namespace ddp::kernels::cpu
