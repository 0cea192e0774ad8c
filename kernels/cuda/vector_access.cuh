// vector_access.cuh - the CUDA side of kernels/cpu/vector_plan.h: 16-byte loads and stores of a Pack, a
// thread's grid-stride position, the element-wise map over a plan (vectors where the plan has them, one
// element at a time elsewhere, the same per-element function for both) and the launch with 32-bit index
// math when n allows. The memory-bound kernels (elementwise, activation, axpy, convert, bf16, optim) use it.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/vector_plan.h"
#include "kernels/cuda/common.cuh"

namespace ddp::kernels::cuda {

// Elements per 16-byte access of the widest of the types (4 float32, 8 bfloat16, 2 float64; 4 for a float32
// <-> bfloat16 conversion, whose bfloat16 side then moves 8 bytes).
template <class... T>
constexpr int vector_width() {
  return static_cast<int>(16 / std::max({sizeof(T)...}));
}

template <int W, class T>
__device__ __forceinline__ Pack<T, W> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, W>*>(p);
}
template <int W, class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, W>& v) {
  *reinterpret_cast<Pack<T, W>*>(p) = v;
}

template <class Index>
__device__ __forceinline__ Index thread_position() {
  return static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
}
template <class Index>
__device__ __forceinline__ Index thread_count() {
  return static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
}

template <int W, class Out, class F, class... In>
__device__ __forceinline__ void map_lanes(Out* out, const F& f, const Pack<In, W>&... in) {
  Pack<Out, W> o;
#pragma unroll
  for (int l = 0; l < W; ++l) o.lane[l] = f(in.lane[l]...);
  store_pack<W>(out, o);
}

// out[i] = f(in[i]...) for every i of the plan; out may be one of the inputs (in place).
template <int W, class Index, class Out, class F, class... In>
__device__ __forceinline__ void map_planned(const VectorPlan& p, const F& f, Out* out, const In*... in) {
  for_each_planned<Index>(
      p, thread_position<Index>(), thread_count<Index>(),
      [&](Index i) { map_lanes<W>(out + i, f, load_pack<W>(in + i)...); },
      [&](Index i) { out[i] = f(in[i]...); });
}

template <int W, class Index, class Out, class F, class... In>
__global__ void map_kernel(VectorPlan p, F f, Out* out, const In*... in) {
  map_planned<W, Index>(p, f, out, in...);
}

// Runs launch(Index{}, grid): Index int32_t when the plan's n allows 32-bit index math, else int64_t; grid
// enough blocks of kBlock threads for the larger of its vectors and scalars (a grid-stride loop covers more).
template <class Launch>
void launch_planned(const VectorPlan& p, Launch&& launch) {
  const int grid = grid_for(std::max<int64_t>(p.vectors, p.scalars()));
  if (index_fits_32(p.n))
    launch(int32_t{}, grid);
  else
    launch(int64_t{}, grid);
}

// out[i] = f(in[i]...) for i in [0, n) on `stream`, vectorized where the pointers allow (vector_plan.h).
template <class Out, class F, class... In>
void map_elements(int64_t n, cudaStream_t stream, const F& f, Out* out, const In*... in) {
  if (n == 0) return;
  constexpr int W = vector_width<Out, In...>();
  const VectorPlan p = plan_vectors(W, n, static_cast<const Out*>(out), in...);
  launch_planned(p, [&](auto index, int grid) {
    map_kernel<W, decltype(index)><<<grid, kBlock, 0, stream>>>(p, f, out, in...);
  });
  DDP_CUDA_CHECK_LAUNCH();
}

}  // namespace ddp::kernels::cuda
