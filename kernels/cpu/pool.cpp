// pool.cpp - CPU max/avg pooling: one pass over the output windows for the forward, a scatter for the
// backward.
#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ddp::kernels::cpu {
namespace {
// The in-bounds part [begin, end) of the window starting at out*stride - padding.
struct Window {
  int64_t begin, end;
};
inline Window window(int64_t out, int64_t size, const PoolGeometry& g) {
  const int64_t start = out * g.stride - g.padding;
  return {std::max<int64_t>(start, 0), std::min(start + g.kernel, size)};
}
}  // namespace

template <class T>
void max_pool2d_forward(const T* x, T* y, int32_t* argmax, const PoolGeometry& g) {
  const int64_t H = g.in_h, W = g.in_w, Ho = g.out_h, Wo = g.out_w;
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* plane = x + p * H * W;
    T* yp = y + p * Ho * Wo;
    int32_t* ap = argmax + p * Ho * Wo;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const Window wh = window(oh, H, g);
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const Window ww = window(ow, W, g);
        T best = -std::numeric_limits<T>::infinity();
        int64_t best_at = wh.begin * W + ww.begin;
        for (int64_t ih = wh.begin; ih < wh.end; ++ih) {
          for (int64_t iw = ww.begin; iw < ww.end; ++iw) {
            const T v = plane[ih * W + iw];
            if (v > best || std::isnan(v)) {  // strict: the first of equal maxima stays
              best = v;
              best_at = ih * W + iw;
            }
          }
        }
        yp[oh * Wo + ow] = best;
        ap[oh * Wo + ow] = static_cast<int32_t>(best_at);
      }
    }
  }
}

template <class T>
void max_pool2d_backward(const T* dy, const int32_t* argmax, T* dx, const PoolGeometry& g) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  std::fill(dx, dx + g.planes * in_plane, T(0));
  for (int64_t p = 0; p < g.planes; ++p) {
    T* dxp = dx + p * in_plane;
    const T* dyp = dy + p * out_plane;
    const int32_t* ap = argmax + p * out_plane;
    for (int64_t i = 0; i < out_plane; ++i) dxp[ap[i]] += dyp[i];
  }
}

template <class T>
void avg_pool2d_forward(const T* x, T* y, const PoolGeometry& g) {
  const int64_t H = g.in_h, W = g.in_w, Ho = g.out_h, Wo = g.out_w;
  const T inv_area = T(1) / static_cast<T>(g.kernel * g.kernel);
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* plane = x + p * H * W;
    T* yp = y + p * Ho * Wo;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const Window wh = window(oh, H, g);
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const Window ww = window(ow, W, g);
        T sum = 0;
        for (int64_t ih = wh.begin; ih < wh.end; ++ih)
          for (int64_t iw = ww.begin; iw < ww.end; ++iw) sum += plane[ih * W + iw];
        yp[oh * Wo + ow] = sum * inv_area;
      }
    }
  }
}

template <class T>
void avg_pool2d_backward(const T* dy, T* dx, const PoolGeometry& g) {
  const int64_t H = g.in_h, W = g.in_w, Ho = g.out_h, Wo = g.out_w;
  const T inv_area = T(1) / static_cast<T>(g.kernel * g.kernel);
  std::fill(dx, dx + g.planes * H * W, T(0));
  for (int64_t p = 0; p < g.planes; ++p) {
    T* plane = dx + p * H * W;
    const T* dyp = dy + p * Ho * Wo;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const Window wh = window(oh, H, g);
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const Window ww = window(ow, W, g);
        const T share = dyp[oh * Wo + ow] * inv_area;
        for (int64_t ih = wh.begin; ih < wh.end; ++ih)
          for (int64_t iw = ww.begin; iw < ww.end; ++iw) plane[ih * W + iw] += share;
      }
    }
  }
}

#define DDP_INSTANTIATE_POOL(T)                                                            \
  template void max_pool2d_forward<T>(const T*, T*, int32_t*, const PoolGeometry&);        \
  template void max_pool2d_backward<T>(const T*, const int32_t*, T*, const PoolGeometry&); \
  template void avg_pool2d_forward<T>(const T*, T*, const PoolGeometry&);                  \
  template void avg_pool2d_backward<T>(const T*, T*, const PoolGeometry&);
DDP_INSTANTIATE_POOL(float)
DDP_INSTANTIATE_POOL(double)
#undef DDP_INSTANTIATE_POOL

}  // namespace ddp::kernels::cpu
