// optim_step.cuh - the SGD and AdamW updates of a range of one tensor, one element at a time or one 16-byte
// vector of every tensor at a time (vector_access.cuh), with kernels/cpu/optim_math.h's per-element update on
// both paths: the single-tensor kernels (optim.cu) run one over a whole tensor, the multi-tensor kernels
// (multi_tensor.cu) one per chunk.
#pragma once
#include "kernels/cpu/optim_math.h"
#include "kernels/cuda/vector_access.cuh"

namespace ddp::kernels::cuda {

template <class T>
constexpr int kWidth = vector_width<T>();

// The update of element j (element) or of the kWidth elements from j (vector), over pointers already at the
// range's start; plan(n) is the range's vector plan, run_step a thread's share of it.
template <class T>
struct SgdStep {
  T* w;
  const T* g;
  T* buf;  // null without momentum
  cpu::SgdConstants<T> c;
  bool first;
  template <class Index>
  __device__ void element(Index j) const {
    const bool has_buf = buf != nullptr;
    T b = has_buf && !first ? buf[j] : T(0);
    w[j] = cpu::sgd_update(w[j], g[j], b, has_buf, first, c);
    if (has_buf) buf[j] = b;
  }
  template <class Index>
  __device__ void vector(Index j) const {
    constexpr int W = kWidth<T>;
    const bool has_buf = buf != nullptr;
    Pack<T, W> wv = load_pack<W>(w + j), b{};
    const Pack<T, W> gv = load_pack<W>(g + j);
    if (has_buf && !first) b = load_pack<W>(buf + j);
#pragma unroll
    for (int l = 0; l < W; ++l)
      wv.lane[l] = cpu::sgd_update(wv.lane[l], gv.lane[l], b.lane[l], has_buf, first, c);
    store_pack<W>(w + j, wv);
    if (has_buf) store_pack<W>(buf + j, b);
  }
  DDP_HOST_DEVICE VectorPlan plan(int64_t n) const {
    return buf ? plan_vectors(kWidth<T>, n, w, g, buf) : plan_vectors(kWidth<T>, n, w, g);
  }
};
template <class T>
struct AdamWStep {
  T *w, *m, *v;
  const T* g;
  cpu::AdamWConstants<T> c;
  cpu::AdamWBiasCorrection<T> bc;
  template <class Index>
  __device__ void element(Index j) const {
    T mj = m[j], vj = v[j];
    w[j] = cpu::adamw_update(w[j], g[j], mj, vj, c, bc);
    m[j] = mj;
    v[j] = vj;
  }
  template <class Index>
  __device__ void vector(Index j) const {
    constexpr int W = kWidth<T>;
    Pack<T, W> wv = load_pack<W>(w + j), mv = load_pack<W>(m + j), vv = load_pack<W>(v + j);
    const Pack<T, W> gv = load_pack<W>(g + j);
#pragma unroll
    for (int l = 0; l < W; ++l)
      wv.lane[l] = cpu::adamw_update(wv.lane[l], gv.lane[l], mv.lane[l], vv.lane[l], c, bc);
    store_pack<W>(w + j, wv);
    store_pack<W>(m + j, mv);
    store_pack<W>(v + j, vv);
  }
  DDP_HOST_DEVICE VectorPlan plan(int64_t n) const { return plan_vectors(kWidth<T>, n, w, g, m, v); }
};

// Thread t of `threads` runs its share of step s over the plan p.
template <class Index, class Step>
__device__ __forceinline__ void run_step(const VectorPlan& p, const Step& s, Index t, Index threads) {
  for_each_planned<Index>(
      p, t, threads, [&](Index j) { s.vector(j); }, [&](Index j) { s.element(j); });
}

}  // namespace ddp::kernels::cuda
