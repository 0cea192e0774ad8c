// powersgd_hook.h - PowerSGD gradient compression as a DDP comm hook (Vogels, Karimireddy, Jaggi 2019;
// PyTorch's powerSGD_hook). Per bucket, each gradient viewed as a matrix M (n = first dimension, m = the rest)
// that is worth compressing - (n + m) * r * min_compression_rate < n * m - is replaced by a rank-r
// approximation: P = M Q, all-reduce P, orthogonalize P, Q = M^T P, all-reduce Q, M ~ P Q^T. The other
// gradients (biases, norms, small or square-ish matrices) are all-reduced as they are, in the same collective
// as the P matrices. Error feedback adds what the approximation dropped to the next iteration's gradient;
// warm start reuses Q; the first start_iter iterations are plain all-reduces (the buckets are rebuilt after
// iteration 1, so error feedback and warm start need start_iter >= 2). See docs/extensions.md.
#pragma once
#include <map>
#include <vector>

#include "runtime/ddp/comm_hook.h"

namespace ddp {

struct PowerSGDOptions {
  int matrix_approximation_rank = 1;  // r, clipped per matrix to min(n, m)
  int64_t start_iter = 1000;          // plain all-reduce before this iteration (PyTorch's default)
  double min_compression_rate = 2;
  bool use_error_feedback = true;
  bool warm_start = true;
  double orthogonalization_epsilon = 0;  // added to column norms (0: a zero column stays zero)
  uint64_t random_seed = 0;              // the same on every rank: identical initial Q everywhere
};

class PowerSGDHook final : public CommHook {
 public:
  explicit PowerSGDHook(PowerSGDOptions options);
  const char* name() const override { return "powersgd"; }
  std::shared_ptr<dist::Work> run(dist::ProcessGroup& pg, GradBucket& bucket) override;

  int64_t iteration() const { return iter_; }
  // Of the last compressed iteration: elements all-reduced, and elements a plain all-reduce would have sent.
  int64_t last_sent_elements() const { return last_sent_; }
  int64_t last_plain_elements() const { return last_plain_; }
  const PowerSGDOptions& options() const { return opt_; }
  // The error-feedback memory of a bucket (flat like it, in its divided units); undefined before compression.
  Tensor error_of(size_t bucket) const {
    auto it = state_.find(bucket);
    return it == state_.end() ? Tensor() : it->second.error;
  }

 private:
  struct Matrix {
    size_t grad;  // index in bucket.gradients
    int64_t n, m, r;
  };
  struct BucketState {
    std::vector<int64_t> layout;  // numel of each gradient: detects a rebuilt bucket
    Tensor error;                 // flat like the bucket (error feedback), in divided units
    std::vector<Tensor> q;        // per compressed matrix (m, r), kept with warm start
  };
  void end_bucket(const GradBucket& bucket);

  PowerSGDOptions opt_;
  int64_t iter_ = 0;
  std::map<size_t, BucketState> state_;
  int64_t sent_ = 0, plain_ = 0, last_sent_ = 0, last_plain_ = 0;
};

// In place: Gram-Schmidt (two passes per column) over the r columns of the row-major (n, r) matrix p (any
// device; CUDA goes through the host). Each column is divided by (its norm + eps). A column that is
// (numerically) in the span of the earlier ones becomes zero, or, with refill_seed != 0, a seeded random
// direction orthogonal to them (PyTorch's QR completes the basis with some orthogonal direction too).
void orthogonalize_columns(Tensor& p, double eps, uint64_t refill_seed = 0);

}  // namespace ddp
