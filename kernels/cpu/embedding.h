// embedding.h - CPU kernels for the embedding lookup (a row gather) and its backward (a row scatter-add).
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// Position of the first index outside [0, vocab); -1 when all are valid.
int64_t first_bad_index(const int64_t* indices, int64_t n, int64_t vocab);

// out[i, :] = weight[indices[i], :].  weight: (vocab, cols), indices: (n) valid, out: (n, cols).
template <class T>
void embedding_forward(const T* weight, const int64_t* indices, T* out, int64_t n, int64_t cols);
// dweight = 0, then dweight[indices[i], :] += dout[i, :] (repeated indices sum).  dweight: (vocab, cols).
template <class T>
void embedding_backward(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t vocab,
                        int64_t cols);

}  // namespace ddp::kernels::cpu
