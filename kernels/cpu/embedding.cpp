// embedding.cpp - CPU embedding gather and scatter-add (sequential over indices, so sums are deterministic).
#include "kernels/cpu/embedding.h"

#include <cstring>

namespace ddp::kernels::cpu {

int64_t first_bad_index(const int64_t* indices, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (indices[i] < 0 || indices[i] >= vocab) return i;
  return -1;
}

template <class T>
void embedding_forward(const T* weight, const int64_t* indices, T* out, int64_t n, int64_t cols) {
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * cols, weight + indices[i] * cols, static_cast<size_t>(cols) * sizeof(T));
}

template <class T>
void embedding_backward(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t vocab,
                        int64_t cols) {
  std::memset(dweight, 0, static_cast<size_t>(vocab * cols) * sizeof(T));
  for (int64_t i = 0; i < n; ++i) {
    T* dst = dweight + indices[i] * cols;
    const T* src = dout + i * cols;
    for (int64_t c = 0; c < cols; ++c) dst[c] += src[c];
  }
}

template void embedding_forward<float>(const float*, const int64_t*, float*, int64_t, int64_t);
template void embedding_forward<double>(const double*, const int64_t*, double*, int64_t, int64_t);
template void embedding_backward<float>(const float*, const int64_t*, float*, int64_t, int64_t, int64_t);
template void embedding_backward<double>(const double*, const int64_t*, double*, int64_t, int64_t, int64_t);

}  // namespace ddp::kernels::cpu
