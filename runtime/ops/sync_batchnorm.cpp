// sync_batchnorm.cpp - forward and backward of sync_batch_norm2d side by side. The per-channel arithmetic
// uses the broadcasting ops (so CPU and CUDA tensors both work); the statistics travel as float64 (exact
// counts) through one all-gather in forward and one all-reduce in backward; the merge of the W per-rank
// statistics is W*(2C+1) numbers and runs on the host.
#include "runtime/ops/sync_batchnorm.h"

#include <cmath>
#include <vector>

#include "runtime/autograd/node.h"
#include "runtime/distributed/tensor_comm_buffer.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape.h"
#include "runtime/distributed/flight_recorder.h"

namespace ddp::ops {
namespace {

void check_channel_vector(const char* what, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  DDP_CHECK(t.dim() == 1 && t.size(0) == x.size(1), "sync_batch_norm2d: ", what, " must be (C) = (", x.size(1),
            ") for x ", shape_str(x.shape()), ", got ", shape_str(t.shape()));
  DDP_CHECK(t.dtype() == x.dtype() && t.device() == x.device(), "sync_batch_norm2d: ", what, " must be ",
            dtype_name(x.dtype()), " on ", x.device().str(), " like x (got ", dtype_name(t.dtype()), " on ",
            t.device().str(), ")");
}

// (C) -> (1, C, 1, 1), for broadcasting against NCHW.
Tensor per_channel(const Tensor& v) { return reshape(v, {1, v.size(0), 1, 1}); }

// A (C) tensor of x's dtype and device from host doubles.
Tensor channel_tensor(const std::vector<double>& values, const Tensor& like) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, like.dtype()).to(like.device());
}

struct SyncBatchNorm2dBackward final : autograd::Node {
  Tensor x, weight, mean, invstd;  // mean/invstd: the global statistics forward normalized with
  double total_count = 0;          // N over all ranks
  dist::ProcessGroup* pg = nullptr;

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    autograd::NoGradGuard ng;
    const int64_t C = x.size(1);
    Tensor dy = grads[0].defined() ? grads[0] : Tensor::zeros_like(x);  // still joins the all-reduce
    DDP_CHECK(dy.shape() == x.shape(), "sync_batch_norm2d backward: gradient has shape ", shape_str(dy.shape()),
              ", expected ", shape_str(x.shape()));
    const bool has_rows = x.numel() > 0;
    Tensor xmu, sum_dy, sum_dy_xmu;
    if (has_rows) {
      xmu = sub(x, per_channel(mean));
      sum_dy = sum(dy, {0, 2, 3});
      sum_dy_xmu = sum(mul(dy, xmu), {0, 2, 3});
    } else {
      sum_dy = Tensor::zeros({C}, x.dtype(), x.device());
      sum_dy_xmu = Tensor::zeros({C}, x.dtype(), x.device());
    }
    // One all-reduce of [sum dy, sum dy*(x-mean)] over every rank's samples.
    Tensor sums = Tensor::empty({2 * C}, DType::F64, x.device());
    sums.slice0(0, C).copy_from(sum_dy);
    sums.slice0(C, 2 * C).copy_from(sum_dy_xmu);
    {
      dist::FlightIssuer who("sync batchnorm backward");
      pg->allreduce(comm_buffer_of(sums), dist::ReduceOp::Sum)->wait();
    }

    Tensor dx, dweight, dbias;
    if (next_edges[1].valid()) dweight = mul(sum_dy_xmu, invstd);  // local: DDP averages it
    if (next_edges[2].valid()) dbias = sum_dy;
    if (next_edges[0].valid()) {
      if (!has_rows) {
        dx = Tensor::empty_like(x);
      } else {
        Tensor g_sum_dy = sums.slice0(0, C).to(x.dtype());
        Tensor g_sum_dy_xmu = sums.slice0(C, 2 * C).to(x.dtype());
        const double inv_n = 1.0 / total_count;
        // dx = w*invstd * (dy - sum_dy/N - (x-mean) * invstd^2 * sum_dy_xmu/N)
        Tensor scale = weight.defined() ? mul(weight, invstd) : invstd;
        Tensor proj = mul_scalar(mul(mul(invstd, invstd), g_sum_dy_xmu), inv_n);
        Tensor centered = sub(dy, per_channel(mul_scalar(g_sum_dy, inv_n)));
        dx = mul(sub(centered, mul(xmu, per_channel(proj))), per_channel(scale));
      }
    }
    return {dx, dweight, dbias};
  }
  const char* name() const override { return "sync_batch_norm2d"; }
  void release_saved() override { x = weight = mean = invstd = Tensor(); }
};

}  // namespace

Tensor sync_batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, dist::ProcessGroup& pg, double momentum, double eps) {
  DDP_CHECK(x.defined() && x.dim() == 4, "sync_batch_norm2d: x must be (N, C, H, W), got ",
            x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  DDP_CHECK(dtype_is_floating(x.dtype()), "sync_batch_norm2d: x must be floating, got ", dtype_name(x.dtype()));
  check_channel_vector("weight", weight, x);
  check_channel_vector("bias", bias, x);
  check_channel_vector("running_mean", running_mean, x);
  check_channel_vector("running_var", running_var, x);
  DDP_CHECK(running_mean.defined() == running_var.defined(),
            "sync_batch_norm2d: running_mean and running_var must be both defined or both undefined");
  DDP_CHECK(eps > 0, "sync_batch_norm2d: eps must be > 0, got ", eps);
  DDP_CHECK(momentum >= 0 && momentum <= 1, "sync_batch_norm2d: momentum must be in [0, 1], got ", momentum);
  const int64_t C = x.size(1);
  const int64_t local_count = x.size(0) * x.size(2) * x.size(3);
  const int world = pg.size();

  Tensor y;
  Tensor mean_t, invstd_t;
  double total = 0;
  {
    autograd::NoGradGuard ng;
    Tensor xd = x.detach();
    // This rank's [mean (C), biased variance (C), count], float64 so that counts stay exact.
    Tensor stats = Tensor::zeros({2 * C + 1}, DType::F64, x.device());
    if (local_count > 0) {
      Tensor m = mean(xd, {0, 2, 3});
      Tensor xc = sub(xd, per_channel(m));
      stats.slice0(0, C).copy_from(m);
      stats.slice0(C, 2 * C).copy_from(mean(mul(xc, xc), {0, 2, 3}));
    }
    stats.slice0(2 * C, 2 * C + 1).fill_(static_cast<double>(local_count));
    Tensor gathered = Tensor::empty({world * (2 * C + 1)}, DType::F64, x.device());
    {
      dist::FlightIssuer who("sync batchnorm forward");
      pg.allgather(comm_buffer_of(stats), comm_buffer_of(gathered))->wait();
    }

    // Merge with the counts: mean = sum n_i mean_i / N, var = sum n_i (var_i + (mean_i - mean)^2) / N.
    const std::vector<double> g = gathered.to_double_vector();
    const auto row = [&](int r) { return g.data() + static_cast<size_t>(r) * (2 * C + 1); };
    for (int r = 0; r < world; ++r) total += row(r)[2 * C];
    DDP_CHECK(total > 1, "sync_batch_norm2d: training needs more than one value per channel over all ranks, got ",
              total, " (x on rank ", pg.rank(), " is ", shape_str(x.shape()),
              "); use larger batches or evaluation mode");
    std::vector<double> gmean(C, 0.0), gvar(C, 0.0), ginvstd(C), unbiased(C);
    for (int r = 0; r < world; ++r)
      for (int64_t c = 0; c < C; ++c) gmean[c] += row(r)[2 * C] * row(r)[c];
    for (int64_t c = 0; c < C; ++c) gmean[c] /= total;
    for (int r = 0; r < world; ++r) {
      const double n = row(r)[2 * C];
      if (n == 0) continue;  // an empty rank's zeros carry no weight
      for (int64_t c = 0; c < C; ++c) {
        const double d = row(r)[c] - gmean[c];
        gvar[c] += n * (row(r)[C + c] + d * d);
      }
    }
    for (int64_t c = 0; c < C; ++c) {
      gvar[c] /= total;
      ginvstd[c] = 1.0 / std::sqrt(gvar[c] + eps);
      unbiased[c] = gvar[c] * total / (total - 1);
    }
    mean_t = channel_tensor(gmean, x);
    invstd_t = channel_tensor(ginvstd, x);
    if (running_mean.defined()) {
      Tensor rm = running_mean.detach(), rv = running_var.detach();
      rm.copy_from(add(mul_scalar(rm, 1 - momentum), mul_scalar(mean_t, momentum)));
      rv.copy_from(add(mul_scalar(rv, 1 - momentum), mul_scalar(channel_tensor(unbiased, x), momentum)));
    }
    if (local_count == 0) {
      y = Tensor::empty_like(x);
    } else {
      Tensor scale = weight.defined() ? mul(weight.detach(), invstd_t) : invstd_t;
      y = mul(sub(xd, per_channel(mean_t)), per_channel(scale));
      if (bias.defined()) y = add(y, per_channel(bias.detach()));
    }
  }
  if (autograd::needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<SyncBatchNorm2dBackward>();
    node->x = x.detach();
    node->weight = weight.defined() ? weight.detach() : Tensor();
    node->mean = mean_t;
    node->invstd = invstd_t;
    node->total_count = total;
    node->pg = &pg;
    autograd::record(node, {&x, &weight, &bias}, {&y});
  }
  return y;
}

}  // namespace ddp::ops
