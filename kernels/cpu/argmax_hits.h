// argmax_hits.h - how many rows of a (rows, cols) score matrix have their largest score at the row's label
// (classification accuracy's numerator), CPU side of kernels/cuda/argmax_hits. Ties go to the first largest
// column (std::max_element's choice); a row holding a NaN never counts (no column of it is the largest), nor
// does a label outside [0, cols). The per-pair choice is one host/device function, so the CUDA kernel's tree
// reduction picks the same column as this loop.
#pragma once
#include <cstdint>

#include "kernels/cpu/host_device.h"

namespace ddp::kernels::cpu {

// The best (score, column) of a run of one row's columns.
template <class T>
struct ScoreAt {
  T score;
  int64_t col;
  bool nan;  // a NaN was seen: the row cannot count
};

template <class T>
DDP_HOST_DEVICE inline ScoreAt<T> better_of(const ScoreAt<T>& a, const ScoreAt<T>& b) {
  // The larger score wins, the lower column on a tie: merging the runs of a row in any grouping picks the
  // first largest column, as one pass from the left does (NaN aside, which only marks the row).
  ScoreAt<T> r = (b.score > a.score || (b.score == a.score && b.col < a.col)) ? b : a;
  r.nan = a.nan || b.nan;
  return r;
}

// Rows i with argmax(scores[i, :]) == labels[i].
template <class T>
int64_t count_argmax_hits(const T* scores, const int64_t* labels, int64_t rows, int64_t cols);

}  // namespace ddp::kernels::cpu
