// sync_batchnorm.cpp - the SyncBatchNorm module and the tree conversion.
#include "runtime/nn/sync_batchnorm.h"

#include "runtime/ops/batchnorm.h"
#include "runtime/ops/sync_batchnorm.h"

namespace ddp::nn {

SyncBatchNorm::SyncBatchNorm(int64_t channels, std::shared_ptr<dist::ProcessGroup> pg, double momentum_,
                             double eps_, DType dtype)
    : BatchNorm2d(channels, momentum_, eps_, dtype), pg_(std::move(pg)) {
  DDP_CHECK(pg_ != nullptr, "SyncBatchNorm: no process group");
}

SyncBatchNorm::SyncBatchNorm(const BatchNorm2d& bn, std::shared_ptr<dist::ProcessGroup> pg)
    : BatchNorm2d(SharedState{bn.weight, bn.bias, bn.running_mean, bn.running_var}, bn.momentum, bn.eps),
      pg_(std::move(pg)) {
  DDP_CHECK(pg_ != nullptr, "SyncBatchNorm: no process group");
  train(bn.is_training());
}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  if (!is_training() || pg_->size() == 1)
    return ops::batch_norm2d(x, weight, bias, running_mean, running_var, is_training(), momentum, eps);
  return ops::sync_batch_norm2d(x, weight, bias, running_mean, running_var, *pg_, momentum, eps);
}

namespace {
void convert_children(Module& parent, const std::shared_ptr<dist::ProcessGroup>& pg, const std::string& prefix) {
  // Copy the list: replace_child edits it.
  auto children = parent.named_children();
  for (auto& [name, child] : children) {
    auto bn = std::dynamic_pointer_cast<BatchNorm2d>(child);
    if (bn && !std::dynamic_pointer_cast<SyncBatchNorm>(child)) {
      parent.replace_child(name, std::make_shared<SyncBatchNorm>(*bn, pg));
      child.reset();
      // Left: our `bn` plus the entries the swap could not reach (a typed member pointer of the parent).
      DDP_CHECK(bn.use_count() == 1, "convert_sync_batchnorm: BatchNorm2d '", prefix + name,
                "' is also held outside the module tree (", bn.use_count() - 1,
                " other reference(s), e.g. a member pointer of its parent), so its forward would keep the old "
                "layer; build the model with nn::SyncBatchNorm there instead");
    } else {
      convert_children(*child, pg, prefix + name + ".");
    }
  }
}

int count_in(const Module& m) {
  int n = 0;
  for (auto& [name, child] : m.named_children())
    n += (dynamic_cast<const SyncBatchNorm*>(child.get()) ? 1 : 0) + count_in(*child);
  return n;
}
}  // namespace

std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               std::shared_ptr<dist::ProcessGroup> pg) {
  DDP_CHECK(module != nullptr, "convert_sync_batchnorm: no module");
  DDP_CHECK(pg != nullptr, "convert_sync_batchnorm: no process group");
  if (auto bn = std::dynamic_pointer_cast<BatchNorm2d>(module); bn && !std::dynamic_pointer_cast<SyncBatchNorm>(module))
    return std::make_shared<SyncBatchNorm>(*bn, pg);
  convert_children(*module, pg, "");
  return module;
}

int count_sync_batchnorm(const Module& module) {
  return (dynamic_cast<const SyncBatchNorm*>(&module) ? 1 : 0) + count_in(module);
}

}  // namespace ddp::nn
