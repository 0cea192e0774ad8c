// loss.h - CPU kernels for the fused cross-entropy (log-softmax + negative log-likelihood in one pass per
// row) and the mean-squared-error loss.
//
// Cross-entropy keeps one number per row, lse = log(sum(exp(logits))), instead of the (rows, cols) softmax:
// backward recomputes softmax = exp(logits - lse), so a GPT-sized vocabulary costs no extra activation
// memory. A row is "ignored" when has_ignore and its target == ignore_index: it adds nothing to the loss or
// the count.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// Position of the first target that is neither in [0, cols) nor the ignore index; -1 when all are valid.
int64_t first_bad_target(const int64_t* targets, int64_t rows, int64_t cols, bool has_ignore,
                         int64_t ignore_index);

// logits: (rows, cols), targets: (rows) all valid (see first_bad_target).
// Writes lse: (rows); returns the sum over non-ignored rows of lse - logits[target] (accumulated in double)
// and their number in *count.
template <class T>
double cross_entropy_forward(const T* logits, const int64_t* targets, int64_t rows, int64_t cols,
                             bool has_ignore, int64_t ignore_index, T* lse, int64_t* count);
// dlogits = dloss[0] / divisor * (exp(logits - lse) - onehot(target)); ignored rows get 0.
// divisor: the count of non-ignored rows for a mean loss, 1 for a summed loss. logits, dlogits: (rows, cols).
template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, const T* lse, const T* dloss,
                            double divisor, int64_t rows, int64_t cols, bool has_ignore, int64_t ignore_index,
                            T* dlogits);

// Returns sum((pred - target)^2) over n elements, accumulated in double.
template <class T>
double mse_forward(const T* pred, const T* target, int64_t n);
// dpred = 2 (pred - target) dloss[0] / n; dtarget = -dpred. Either output may be null.
template <class T>
void mse_backward(const T* pred, const T* target, const T* dloss, int64_t n, T* dpred, T* dtarget);

}  // namespace ddp::kernels::cpu
