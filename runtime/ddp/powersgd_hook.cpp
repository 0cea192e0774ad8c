// powersgd_hook.cpp - the PowerSGD hook: the matrix split, the two-stage collective (uncompressed + P, then
// Q) chained on one Work, error feedback and warm start. Units: the bucket holds gradients already divided by
// the world size, so P and Q are sums of divided terms and Q needs no division (it is the average); the error
// kept per rank is M' - M_approx / W, i.e. PyTorch's "local minus approximated average" in divided units.
#include "runtime/ddp/powersgd_hook.h"

#include <cmath>

#include "runtime/autograd/node.h"
#include "runtime/distributed/comm_buffer_of.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/shape.h"
#include "runtime/tensor/tensor_math.h"

namespace ddp {

namespace {
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  return x ^ (x >> 29);
}
}  // namespace

void orthogonalize_columns(Tensor& p, double eps, uint64_t refill_seed) {
  DDP_CHECK(p.dim() == 2, "orthogonalize_columns: expected a matrix, got ", shape_str(p.shape()));
  const int64_t n = p.size(0), r = p.size(1);
  std::vector<double> v = p.to_double_vector();
  // Relative residual below which a column counts as dependent: sqrt of the dtype's rounding unit.
  const double dependent = p.dtype() == DType::F64 ? 1.5e-8 : 3.5e-4;
  for (int64_t j = 0; j < r; ++j) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      double before = 0;
      for (int64_t i = 0; i < n; ++i) before += v[i * r + j] * v[i * r + j];
      // Two passes ("twice is enough"): with a rank-deficient matrix (a gradient of lower rank than r, e.g. a
      // batch smaller than the layer) one pass leaves the residual of a dependent column far from orthogonal.
      for (int pass = 0; pass < 2; ++pass)
        for (int64_t k = 0; k < j; ++k) {
          double dot = 0;
          for (int64_t i = 0; i < n; ++i) dot += v[i * r + j] * v[i * r + k];
          for (int64_t i = 0; i < n; ++i) v[i * r + j] -= dot * v[i * r + k];
        }
      double norm = 0;
      for (int64_t i = 0; i < n; ++i) norm += v[i * r + j] * v[i * r + j];
      norm = std::sqrt(norm);
      if (norm > dependent * std::sqrt(before)) {
        const double scale = norm + eps > 0 ? 1.0 / (norm + eps) : 0.0;
        for (int64_t i = 0; i < n; ++i) v[i * r + j] *= scale;
        break;
      }
      // The column lay in the span of the earlier ones and left only rounding noise, which must not become a
      // direction. For P: zero (P P^T stays the projection onto P's columns). For Q (refill_seed set): a fresh
      // random direction, so the next P = M Q can still reach directions the last gradient did not have.
      Tensor fresh = refill_seed != 0 && attempt == 0
                         ? Tensor::randn({n}, refill_seed + static_cast<uint64_t>(j), DType::F64)
                         : Tensor::zeros({n}, DType::F64);
      const double* f = fresh.data<double>();
      for (int64_t i = 0; i < n; ++i) v[i * r + j] = f[i];
      if (refill_seed == 0 || attempt == 1) break;
    }
  }
  p.copy_from(Tensor::from_vector(v, p.shape(), DType::F64));
}

PowerSGDHook::PowerSGDHook(PowerSGDOptions options) : opt_(options) {
  DDP_CHECK(opt_.matrix_approximation_rank >= 1, "PowerSGD: matrix_approximation_rank must be >= 1, got ",
            opt_.matrix_approximation_rank);
  DDP_CHECK(opt_.start_iter >= 0, "PowerSGD: start_iter must be >= 0, got ", opt_.start_iter);
  DDP_CHECK(!(opt_.use_error_feedback || opt_.warm_start) || opt_.start_iter >= 2,
            "PowerSGD: start_iter is ", opt_.start_iter,
            " but error feedback and warm start keep per-bucket state, and DDP rebuilds its buckets after "
            "iteration 1: use start_iter >= 2 (or turn both off)");
  DDP_CHECK(opt_.min_compression_rate >= 0, "PowerSGD: min_compression_rate must be >= 0");
}

void PowerSGDHook::end_bucket(const GradBucket& bucket) {
  if (!bucket.is_last) return;
  ++iter_;
  if (sent_ > 0 || plain_ > 0) {
    last_sent_ = sent_;
    last_plain_ = plain_;
  }
  sent_ = plain_ = 0;
}

std::shared_ptr<dist::Work> PowerSGDHook::run(dist::ProcessGroup& pg, GradBucket& bucket) {
  autograd::NoGradGuard ng;
  if (iter_ < opt_.start_iter) {
    bytes_ += static_cast<int64_t>(bucket.buffer.nbytes());
    auto w = pg.allreduce(comm_buffer_of(bucket.buffer), dist::ReduceOp::Sum);
    end_bucket(bucket);
    return w;
  }
  // Which gradients are worth compressing, and this bucket's state (reset when its layout changed).
  std::vector<Matrix> mats;
  std::vector<size_t> plain_grads;
  std::vector<int64_t> layout;
  for (size_t i = 0; i < bucket.gradients.size(); ++i) {
    const Tensor& g = bucket.gradients[i];
    layout.push_back(g.numel());
    const int64_t n = g.dim() == 0 ? 1 : g.size(0), m = n > 0 ? g.numel() / n : 0;
    const int64_t r = std::min<int64_t>({n, m, opt_.matrix_approximation_rank});
    if (g.numel() > 0 && static_cast<double>((n + m) * r) * opt_.min_compression_rate < static_cast<double>(n * m))
      mats.push_back({i, n, m, r});
    else
      plain_grads.push_back(i);
  }
  BucketState& st = state_[bucket.index];
  if (st.layout != layout) st = BucketState{layout, Tensor(), {}};
  Tensor& buf = bucket.buffer;
  if (opt_.use_error_feedback) {
    if (!st.error.defined()) st.error = Tensor::zeros_like(buf);
    add_(buf, st.error);  // M' = divided gradient + what was dropped last time
  }
  if (st.q.size() != mats.size()) st.q.assign(mats.size(), Tensor());

  // Stage 1: [uncompressed gradients | P_1 | P_2 | ...] in one all-reduce, P_k = M_k Q_k.
  int64_t plain_numel = 0, p_numel = 0;
  for (size_t i : plain_grads) plain_numel += bucket.gradients[i].numel();
  for (auto& mt : mats) p_numel += mt.n * mt.r;
  Tensor stage1 = Tensor::empty({plain_numel + p_numel}, buf.dtype(), buf.device());
  int64_t off = 0;
  for (size_t i : plain_grads) {
    const Tensor& g = bucket.gradients[i];
    stage1.slice0(off, off + g.numel()).copy_from(g.view({g.numel()}));
    off += g.numel();
  }
  std::vector<Tensor> ps(mats.size());
  for (size_t k = 0; k < mats.size(); ++k) {
    const Matrix& mt = mats[k];
    Tensor& q = st.q[k];
    if (!opt_.warm_start || !q.defined()) {
      const uint64_t seed = mix(mix(opt_.random_seed, bucket.index), mix(k, static_cast<uint64_t>(iter_)));
      q = Tensor::randn({mt.m, mt.r}, seed, buf.dtype()).to(buf.device());
    }
    orthogonalize_columns(q, opt_.orthogonalization_epsilon, mix(opt_.random_seed + 1, static_cast<uint64_t>(iter_)));
    Tensor mat = bucket.gradients[mt.grad].view({mt.n, mt.m});
    ps[k] = stage1.slice0(off, off + mt.n * mt.r).view({mt.n, mt.r});
    ps[k].copy_from(ops::matmul(mat, q));
    off += mt.n * mt.r;
  }
  bytes_ += static_cast<int64_t>(stage1.nbytes());
  sent_ += stage1.numel();
  plain_ += buf.numel();
  auto first = pg.allreduce(comm_buffer_of(stage1), dist::ReduceOp::Sum);

  // Stage 2 (on wait): orthogonalize P, Q = M^T P, all-reduce Q, M ~ P Q^T, error = M' - M~/W.
  int64_t q_numel = 0;
  for (auto& mt : mats) q_numel += mt.m * mt.r;
  sent_ += q_numel;
  bytes_ += q_numel * static_cast<int64_t>(dtype_size(buf.dtype()));
  const double world = pg.size();
  const bool keep_error = opt_.use_error_feedback, keep_q = opt_.warm_start;
  end_bucket(bucket);
  GradBucket b = bucket;  // views of the reducer's buffer: stay valid until the work is waited
  dist::ProcessGroup* group = &pg;
  BucketState* state = &st;
  auto then = [b, mats, plain_grads, stage1, ps, q_numel, world, keep_error, keep_q, group, state]() mutable {
    autograd::NoGradGuard ng2;
    int64_t o = 0;
    for (size_t i : plain_grads) {  // averaged as they are
      Tensor g = b.gradients[i];
      g.view({g.numel()}).copy_from(stage1.slice0(o, o + g.numel()));
      o += g.numel();
    }
    Tensor qs = Tensor::empty({q_numel}, b.buffer.dtype(), b.buffer.device());
    int64_t qo = 0;
    std::vector<Tensor> qviews(mats.size());
    for (size_t k = 0; k < mats.size(); ++k) {
      orthogonalize_columns(ps[k], 0.0);
      Tensor mat = b.gradients[mats[k].grad].view({mats[k].n, mats[k].m});
      qviews[k] = qs.slice0(qo, qo + mats[k].m * mats[k].r).view({mats[k].m, mats[k].r});
      qviews[k].copy_from(ops::matmul(ops::transpose(mat, 0, 1), ps[k]));
      qo += mats[k].m * mats[k].r;
    }
    if (q_numel > 0) group->allreduce(comm_buffer_of(qs), dist::ReduceOp::Sum)->wait();
    // Uncompressed gradients keep no error (PyTorch keeps local - average there, which sums to zero over the
    // ranks and so never changes the average).
    if (keep_error) state->error.zero_();
    for (size_t k = 0; k < mats.size(); ++k) {
      Tensor mat = b.gradients[mats[k].grad].view({mats[k].n, mats[k].m});
      Tensor approx = ops::linear(ps[k], qviews[k]);  // P Q^T
      if (keep_error) {
        // The error lives at the same offsets as the gradient inside the flat bucket.
        const int64_t start = (mat.impl()->offset - b.buffer.impl()->offset);
        Tensor err = state->error.slice0(start, start + mat.numel()).view(mat.shape());
        err.copy_from(mat);
        add_(err, approx, -1.0 / world);
      }
      mat.copy_from(approx);
      state->q[k] = keep_q ? qviews[k].clone() : Tensor();
    }
  };
  return std::make_shared<ChainedWork>("powersgd of bucket " + std::to_string(bucket.index), first, then);
}

}  // namespace ddp
