// sync_batchnorm.h - SyncBatchNorm: a BatchNorm2d whose training-mode statistics span every rank of a process
// group (ops::sync_batch_norm2d), and convert_sync_batchnorm, which swaps a model's BatchNorm2d layers for it.
// With it, N ranks with batch b train exactly like one process with batch N*b (docs/extensions.md).
#pragma once
#include <memory>

#include "runtime/distributed/process_group.h"
#include "runtime/nn/layers.h"

namespace ddp::nn {

class SyncBatchNorm : public BatchNorm2d {
 public:
  SyncBatchNorm(int64_t channels, std::shared_ptr<dist::ProcessGroup> pg, double momentum = 0.1,
                double eps = 1e-5, DType dtype = DType::F32);
  // Takes over `bn`'s settings and shares (not copies) its weight, bias and running statistics.
  SyncBatchNorm(const BatchNorm2d& bn, std::shared_ptr<dist::ProcessGroup> pg);
  // Training with a group of more than one rank: global statistics. Otherwise plain batch_norm2d.
  Tensor forward(const Tensor& x) override;
  const std::shared_ptr<dist::ProcessGroup>& process_group() const { return pg_; }

 private:
  std::shared_ptr<dist::ProcessGroup> pg_;
};

// Replaces every BatchNorm2d in `module`'s tree (recursively) with a SyncBatchNorm over `pg` that shares its
// tensors, keeping names and order (so checkpoints and DDP see the same parameters). Returns the new root:
// `module` itself, or a SyncBatchNorm when `module` is a BatchNorm2d. Call it before wrapping in DDP. Throws
// when a module keeps its own pointer to a BatchNorm2d besides the tree (the swap would not reach it).
std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               std::shared_ptr<dist::ProcessGroup> pg);
// How many SyncBatchNorm layers `module`'s tree holds.
int count_sync_batchnorm(const Module& module);

}  // namespace ddp::nn
