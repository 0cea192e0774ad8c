// loss.cpp - forward and backward of cross_entropy and mse_loss, dispatching to kernels/{cpu,cuda}/loss.
// A bad cross-entropy target is raised at once on the CPU; on a GPU the forward kernel reports it into a slot
// of runtime/tensor/device_checks.h (raised at the next host read) and leaves its row out.
#include "runtime/ops/loss.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "kernels/cpu/loss.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"
#include "runtime/ops/shape.h"
#include "runtime/ops/index_errors.h"
#include "runtime/ops/mixed_precision.h"
#include "runtime/tensor/device_checks.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/loss.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::ops {
namespace {
std::atomic<int64_t> g_gradients_over_logits{0};

struct CrossEntropyBackward final : autograd::Node {
  Tensor logits, targets, lse;  // lse: (rows) log-sum-exp of each row
  Tensor count_device;          // CUDA only: the number of non-ignored rows, a device int64 scalar
  int64_t count = 0;            // CPU: the number of non-ignored rows
  int64_t rows = 0, cols = 0;  // cols: the classes
  int64_t row_stride = 0;       // the logits' row length (> cols: a padded vocabulary, CUDA only)
  CrossEntropyOptions options;

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    Tensor dlogits = logits_memory_or_new();
    const bool mean = options.reduction == LossReduction::Mean;
    const bool has_ignore = options.ignore_index.has_value();
    const int64_t ignore = options.ignore_index.value_or(0);
#ifdef DDP_WITH_CUDA
    if (logits.dtype() == DType::BF16) {  // CUDA only: the CPU widens bf16 logits first (cross_entropy)
      kernels::cuda::cross_entropy_backward(
          logits.data<BFloat16>(), targets.data<int64_t>(), lse.data<float>(), grads[0].data<float>(),
          mean ? count_device.data<int64_t>() : nullptr, rows, cols, row_stride, has_ignore, ignore,
          dlogits.data<BFloat16>(), cuda::current_stream());
      return {dlogits};
    }
#endif
    DDP_DISPATCH_FLOATING(logits.dtype(), "cross_entropy backward", [&] {
#ifdef DDP_WITH_CUDA
      if (logits.device().is_cuda()) {
        kernels::cuda::cross_entropy_backward(
            logits.data<scalar_t>(), targets.data<int64_t>(), lse.data<scalar_t>(), grads[0].data<scalar_t>(),
            mean ? count_device.data<int64_t>() : nullptr, rows, cols, row_stride, has_ignore, ignore,
            dlogits.data<scalar_t>(), cuda::current_stream());
        return;
      }
#endif
      const double divisor = mean ? static_cast<double>(count) : 1.0;
      kernels::cpu::cross_entropy_backward(logits.data<scalar_t>(), targets.data<int64_t>(),
                                           lse.data<scalar_t>(), grads[0].data<scalar_t>(), divisor, rows,
                                           cols, has_ignore, ignore, dlogits.data<scalar_t>());
    });
    return {dlogits};
  }
  const char* name() const override { return "cross_entropy"; }
  void release_saved() override { logits = targets = lse = count_device = Tensor(); }

  // The gradient is written over the logits when nothing else can see them: this node holds the only handle
  // and the only view of their memory, and the backward drops saved tensors after this node (no
  // retain_graph). Each element is read before it is written at the same index (kernels/{cpu,cuda}/loss), so
  // the values are bitwise those of a separate buffer; the classifier's (B, T, vocab) gradient then costs no
  // memory beyond its logits (llm.c fuses the same way). Otherwise a new buffer.
  Tensor logits_memory_or_new() {
    const bool only_holder =
        logits.impl_ptr().use_count() == 1 && logits.storage() && logits.storage().use_count() == 1;
    if (only_holder && autograd::saved_tensors_die_after_apply()) {
      g_gradients_over_logits.fetch_add(1, std::memory_order_relaxed);
      return logits;
    }
    return Tensor::empty_like(logits);
  }
};

struct MseBackward final : autograd::Node {
  Tensor pred, target;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor()};
    Tensor dpred, dtarget;
    if (next_edges[0].valid()) dpred = Tensor::empty_like(pred);
    if (next_edges[1].valid()) dtarget = Tensor::empty_like(target);
    if (pred.numel() == 0) return {dpred, dtarget};
    DDP_DISPATCH_FLOATING(pred.dtype(), "mse_loss backward", [&] {
      scalar_t* dp = dpred.defined() ? dpred.data<scalar_t>() : nullptr;
      scalar_t* dt = dtarget.defined() ? dtarget.data<scalar_t>() : nullptr;
      DDP_KERNEL_ON_STREAM(pred.device(), mse_backward, pred.data<scalar_t>(), target.data<scalar_t>(),
                           grads[0].data<scalar_t>(), pred.numel(), dp, dt);
    });
    return {dpred, dtarget};
  }
  const char* name() const override { return "mse_loss"; }
  void release_saved() override { pred = target = Tensor(); }
};
}  // namespace

int64_t cross_entropy_gradients_over_logits() { return g_gradients_over_logits.load(); }

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  DDP_CHECK(logits.defined() && targets.defined(), "cross_entropy: logits or targets is undefined");
  DDP_CHECK(logits.dim() >= 1, "cross_entropy: logits must be (..., C) with C classes last; got shape ()");
  DDP_CHECK(targets.dtype() == DType::I64, "cross_entropy: targets must be int64 class indices; got ",
            dtype_name(targets.dtype()), " (convert with .to(DType::I64))");
  const Shape row_shape(logits.shape().begin(), logits.shape().end() - 1);
  DDP_CHECK(targets.shape() == row_shape, "cross_entropy: targets of shape ", shape_str(targets.shape()),
            " do not match logits of shape ", shape_str(logits.shape()), "; expected targets of shape ",
            shape_str(row_shape), " (one class index per row of logits)");
  DDP_CHECK(logits.device() == targets.device(), "cross_entropy: logits on ", logits.device().str(),
            " but targets on ", targets.device().str(), "; move both to one device");
  const int64_t row_stride = logits.size(-1), rows = shape_numel(row_shape);
  DDP_CHECK(row_stride > 0, "cross_entropy: logits of shape ", shape_str(logits.shape()), " have zero classes");
  DDP_CHECK(options.classes >= 0 && options.classes <= row_stride, "cross_entropy: classes = ", options.classes,
            " but the logits of shape ", shape_str(logits.shape()), " have ", row_stride,
            " columns; classes must be in [1, ", row_stride, "] (0: every column)");
  const int64_t cols = options.classes > 0 ? options.classes : row_stride;
  DDP_CHECK(dtype_is_floating(logits.dtype()),
            "cross_entropy: logits must be float32, float64 or bfloat16; got ", dtype_name(logits.dtype()));
  // bf16 logits on the CPU: widened (exact) for the float32 kernels; the gradient comes back rounded once, as
  // the CUDA kernel writes it
  if (logits.dtype() == DType::BF16 && logits.device().is_cpu())
    return cross_entropy(widen_bf16(logits), targets, options);
  if (cols < row_stride && logits.device().is_cpu()) {
    // A padded vocabulary on the CPU: the CPU kernels take dense rows, so the classes' columns are sliced out
    // (ops::slice's backward gives the padding columns zero gradient); CUDA reads the padded rows in place.
    CrossEntropyOptions dense = options;
    dense.classes = 0;
    return cross_entropy(slice(logits, logits.dim() - 1, 0, cols), targets, dense);
  }
  const bool has_ignore = options.ignore_index.has_value();
  const int64_t ignore = options.ignore_index.value_or(0);
  const bool mean = options.reduction == LossReduction::Mean;

  // bf16 logits: a float32 loss (and lse), as the arithmetic is
  const DType loss_dtype = logits.dtype() == DType::BF16 ? DType::F32 : logits.dtype();
  Tensor loss = Tensor::empty({}, loss_dtype, logits.device());
  Tensor lse = Tensor::empty({rows}, loss_dtype, logits.device());
  auto node = std::make_shared<CrossEntropyBackward>();
#ifdef DDP_WITH_CUDA
  if (logits.device().is_cuda()) {
    Tensor row_loss = Tensor::empty({rows}, loss_dtype, logits.device());
    Tensor count = Tensor::empty({}, DType::I64, logits.device());
    // No host wait: a bad target is raised by ddp::check_device_errors() (the next host read).
    unsigned long long* first_bad =
        reserve_device_check({targets, [shape = targets.shape(), cols, ignore_index = options.ignore_index](
                                           int64_t value, int64_t pos) {
                                return cross_entropy_target_error(shape, cols, ignore_index, value, pos);
                              }});
    if (logits.dtype() == DType::BF16) {
      kernels::cuda::cross_entropy_forward(logits.data<BFloat16>(), targets.data<int64_t>(), rows, cols,
                                           row_stride, has_ignore, ignore, mean, lse.data<float>(),
                                           row_loss.data<float>(), loss.data<float>(), count.data<int64_t>(),
                                           first_bad, cuda::current_stream());
    } else {
      DDP_DISPATCH_FLOATING(logits.dtype(), "cross_entropy", [&] {
        kernels::cuda::cross_entropy_forward(logits.data<scalar_t>(), targets.data<int64_t>(), rows, cols,
                                             row_stride, has_ignore, ignore, mean, lse.data<scalar_t>(),
                                             row_loss.data<scalar_t>(), loss.data<scalar_t>(),
                                             count.data<int64_t>(), first_bad, cuda::current_stream());
      });
    }
    node->count_device = count;
  } else
#endif
  {
    DDP_CHECK(logits.device().is_cpu(), "cross_entropy on ", logits.device().str(),
              " is not available in this build");
    const int64_t* pt = targets.data<int64_t>();
    const int64_t bad = kernels::cpu::first_bad_target(pt, rows, cols, has_ignore, ignore);
    if (bad >= 0)
      DDP_FAIL(cross_entropy_target_error(targets.shape(), cols, options.ignore_index, pt[bad], bad));
    DDP_DISPATCH_FLOATING(logits.dtype(), "cross_entropy", [&] {
      int64_t count = 0;
      const double total = kernels::cpu::cross_entropy_forward(
          logits.data<scalar_t>(), pt, rows, cols, has_ignore, ignore, lse.data<scalar_t>(), &count);
      const double value = !mean       ? total
                           : count > 0 ? total / static_cast<double>(count)
                                       : std::numeric_limits<double>::quiet_NaN();
      loss.data<scalar_t>()[0] = static_cast<scalar_t>(value);
      node->count = count;
    });
  }
  if (autograd::needs_grad({&logits})) {
    node->logits = logits;
    node->row_stride = row_stride;
    node->targets = targets;
    node->lse = lse;
    node->rows = rows;
    node->cols = cols;
    node->options = options;
    autograd::record(node, {&logits}, {&loss});
  }
  return loss;
}

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  DDP_CHECK(pred.defined() && target.defined(), "mse_loss: pred or target is undefined");
  DDP_CHECK(pred.shape() == target.shape(), "mse_loss: pred of shape ", shape_str(pred.shape()),
            " and target of shape ", shape_str(target.shape()), " differ; they must have the same shape");
  DDP_CHECK(pred.dtype() == target.dtype(), "mse_loss: pred is ", dtype_name(pred.dtype()), " but target is ",
            dtype_name(target.dtype()), "; convert one with .to(dtype)");
  DDP_CHECK(pred.device() == target.device(), "mse_loss: pred on ", pred.device().str(), " but target on ",
            target.device().str());
  Tensor loss = Tensor::empty({}, pred.dtype(), pred.device());
  if (pred.numel() == 0) {  // the mean of nothing is NaN, as in PyTorch; the gradients are empty
    loss = Tensor::full({}, std::numeric_limits<double>::quiet_NaN(), pred.dtype(), pred.device());
  } else {
    DDP_DISPATCH_FLOATING(pred.dtype(), "mse_loss", [&] {
#ifdef DDP_WITH_CUDA
      if (pred.device().is_cuda()) {
        kernels::cuda::mse_forward(pred.data<scalar_t>(), target.data<scalar_t>(), pred.numel(),
                                   loss.data<scalar_t>(), cuda::current_stream());
        return;
      }
#endif
      DDP_CHECK(pred.device().is_cpu(), "mse_loss on ", pred.device().str(),
                " is not available in this build");
      const double total =
          kernels::cpu::mse_forward(pred.data<scalar_t>(), target.data<scalar_t>(), pred.numel());
      loss.data<scalar_t>()[0] = static_cast<scalar_t>(total / static_cast<double>(pred.numel()));
    });
  }
  if (autograd::needs_grad({&pred, &target})) {
    auto node = std::make_shared<MseBackward>();
    node->pred = pred;
    node->target = target;
    autograd::record(node, {&pred, &target}, {&loss});
  }
  return loss;
}

}  // namespace ddp::ops
