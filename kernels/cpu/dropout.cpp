// dropout.cpp - CPU dropout: the counter-based mask of dropout.h applied to a flat array.
#include "kernels/cpu/dropout.h"

namespace ddp::kernels::cpu {

template <class T>
void dropout_apply(const T* x, T* y, int64_t n, uint64_t key, uint64_t offset, uint64_t threshold, T scale) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = dropout_keep(key, offset + static_cast<uint64_t>(i), threshold) ? x[i] * scale : T(0);
}

template void dropout_apply<float>(const float*, float*, int64_t, uint64_t, uint64_t, uint64_t, float);
template void dropout_apply<double>(const double*, double*, int64_t, uint64_t, uint64_t, uint64_t, double);

}  // namespace ddp::kernels::cpu
