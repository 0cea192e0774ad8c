// reduce.h - sums over chosen dimensions on the CPU (float sums accumulate in double) and the broadcast copy
// that is their backward. Shapes are first coalesced into runs of adjacent dimensions that are all reduced
// or all kept, so the work becomes a few "(outer, r, inner) -> (outer, inner)" passes over contiguous memory.
#pragma once
#include <cstdint>
#include <vector>

namespace ddp::kernels::cpu {

using Dims = std::vector<int64_t>;

// A run of adjacent dimensions that are all reduced or all kept.
struct DimGroup {
  int64_t size;
  bool reduced;
};
// Merges the dimensions of `shape` (reduced[d] says whether d is summed) into alternating runs; size-1
// dimensions are dropped (they change no index). An all-size-1 shape gives no groups.
std::vector<DimGroup> group_dims(const Dims& shape, const std::vector<bool>& reduced);

// out[o, j] = scale * sum_r x[o, r, j] for x (outer, r, inner) -> out (outer, inner); accumulates in double.
template <class In, class Out>
void sum_middle(const In* x, int64_t outer, int64_t r, int64_t inner, Out* out, double scale);

// out (shape with the reduced dimensions removed or kept as 1) = scale * sum of x over the reduced
// dimensions.
template <class T>
void sum_dims(const T* x, const Dims& shape, const std::vector<bool>& reduced, T* out, double scale);

// The backward of sum_dims: out (shape) = scale * g broadcast along the reduced dimensions.
template <class T>
void expand_dims(const T* g, const Dims& shape, const std::vector<bool>& reduced, T* out, double scale);

}  // namespace ddp::kernels::cpu
