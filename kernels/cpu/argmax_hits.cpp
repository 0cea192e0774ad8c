// argmax_hits.cpp - the CPU count of rows whose largest score sits at their label (argmax_hits.h).
#include "kernels/cpu/argmax_hits.h"

namespace ddp::kernels::cpu {

template <class T>
int64_t count_argmax_hits(const T* scores, const int64_t* labels, int64_t rows, int64_t cols) {
  int64_t hits = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (cols <= 0) continue;
    const T* row = scores + i * cols;
    ScoreAt<T> best{row[0], 0, row[0] != row[0]};
    for (int64_t j = 1; j < cols; ++j) best = better_of(best, ScoreAt<T>{row[j], j, row[j] != row[j]});
    if (!best.nan && best.col == labels[i]) ++hits;
  }
  return hits;
}

template int64_t count_argmax_hits<float>(const float*, const int64_t*, int64_t, int64_t);
template int64_t count_argmax_hits<double>(const double*, const int64_t*, int64_t, int64_t);

}  // namespace ddp::kernels::cpu
