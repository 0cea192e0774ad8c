// vector_plan.h - how an element-wise kernel splits n elements into 16-byte vector accesses and scalar ones,
// decided on the host and followed by the CUDA kernels (kernels/cuda/vector_access.cuh); g++ compiles the
// same plan and loop so a CPU test checks that every element is visited exactly once.
//
// A plan for pointers p_1..p_k (each of its own element type) and a width of W elements: a vector access of
// pointer p_j moves W * sizeof(element_j) bytes (16 for the widest type) and needs that alignment. When every
// pointer is the same number of elements m past such a boundary, the first (W - m) % W elements are scalar
// (the head), then come whole vectors, then the scalar rest (the tail). When the pointers are misaligned
// differently (e.g. a view offset by one element read into a fresh output), or a pointer is not aligned to
// its own element, or n has no whole vector, every element is scalar: the kernel does what it did before
// plans. Per element the math is the same either way; only the loads and stores are grouped.
#pragma once
#include <cstdint>

#include "kernels/cpu/host_device.h"

namespace ddp::kernels {

struct VectorPlan {
  int64_t n = 0;        // elements in all
  int64_t head = 0;     // scalar elements [0, head)
  int64_t vectors = 0;  // then vectors v = 0..vectors-1 of `width` elements from head + v * width
  int width = 1;

  DDP_HOST_DEVICE int64_t tail_begin() const { return head + vectors * width; }
  // Elements done one at a time: the head and the tail [tail_begin(), n).
  DDP_HOST_DEVICE int64_t scalars() const { return n - vectors * width; }
};

namespace vector_plan_detail {
// How many elements p is past a boundary of `width` elements (its vector's alignment); -1 when p is not
// aligned to its own element type.
template <class T>
DDP_HOST_DEVICE int64_t elements_past_boundary(const T* p, int width) {
  const auto bytes = reinterpret_cast<uintptr_t>(p);
  if (bytes % sizeof(T) != 0) return -1;
  return static_cast<int64_t>((bytes / sizeof(T)) % static_cast<uintptr_t>(width));
}
template <class T, class... Rest>
DDP_HOST_DEVICE bool same_offset(int64_t m, int width, const T* p, const Rest*... rest) {
  if (elements_past_boundary(p, width) != m) return false;
  if constexpr (sizeof...(Rest) == 0)
    return true;
  else
    return same_offset(m, width, rest...);
}
}  // namespace vector_plan_detail

// The plan for n elements of the pointers `first, rest...` in vectors of `width` elements (16 bytes divided
// by the widest element's size: 4 for float32, 8 for bfloat16, 2 for float64, 4 for float32 <-> bfloat16).
template <class T, class... Rest>
DDP_HOST_DEVICE VectorPlan plan_vectors(int width, int64_t n, const T* first, const Rest*... rest) {
  VectorPlan p;
  p.n = n;
  const int64_t m = vector_plan_detail::elements_past_boundary(first, width);
  bool together = m >= 0;
  if constexpr (sizeof...(Rest) > 0)
    together = together && vector_plan_detail::same_offset(m, width, rest...);
  if (!together || width <= 1) return p;  // all scalar
  const int64_t head = (width - m) % width;
  if (head > n || (n - head) / width == 0) return p;
  p.head = head;
  p.vectors = (n - head) / width;
  p.width = width;
  return p;
}

// True when a grid-stride loop over n elements (or fewer vectors) can count in 32 bits: n plus one stride of
// the largest grid (65535 blocks of 1024 threads) stays below 2^31.
DDP_HOST_DEVICE constexpr bool index_fits_32(int64_t n) { return n <= INT32_MAX - int64_t(65535) * 1024; }

// Thread `t` of `threads` does its share of the plan: vector(i) for the vectors it owns (i: the vector's
// first element), then scalar(i) for its scalar elements. The CUDA kernels call it with their grid-stride
// position; the CPU test calls it for every t to check the coverage. Index: int32_t when index_fits_32(n).
template <class Index, class VectorFn, class ScalarFn>
DDP_HOST_DEVICE void for_each_planned(const VectorPlan& p, Index t, Index threads, VectorFn&& vector,
                                      ScalarFn&& scalar) {
  const Index vectors = static_cast<Index>(p.vectors), head = static_cast<Index>(p.head);
  const Index width = static_cast<Index>(p.width), scalars = static_cast<Index>(p.scalars());
  for (Index v = t; v < vectors; v += threads) vector(head + v * width);
  for (Index k = t; k < scalars; k += threads) scalar(k < head ? k : k + vectors * width);
}

// W elements of T moved as one access (16 bytes for the widest type): the unit a vector load or store reads
// or writes.
template <class T, int W>
struct alignas(sizeof(T) * W) Pack {
  T lane[W];
};

}  // namespace ddp::kernels
