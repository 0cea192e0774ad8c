// deterministic_reduction.h - the deterministic mode's gradient sum: the mean over a step's micro-batches,
// bitwise the same whichever rank computed which micro-batch, at any world size, bucket cap, backend or
// thread count (docs/determinism.md).
//
// Each rank runs its micro-batches one backward at a time (no DDP communication: every backward under
// no_sync) and hands each micro-batch's gradients over with end_micro_batch() (they are moved out of .grad,
// not copied). finish_step() then, collectively:
//   1. takes every block's largest exponent over all contributions of all ranks, and whether any rank's
//      micro-batch gave each parameter a gradient (one int32 MAX all-reduce: exact, order-free);
//   2. turns each contribution into 64-bit fixed point under those exponents and adds the integers
//      (kernels/cpu/fixed_point.h) - integer addition is associative, so the grouping into ranks and the
//      order of arrival cannot change a bit;
//   3. all-reduces the integers and the micro-batch count (one int64 SUM all-reduce: exact in any
//      algorithm, ring or tree, on shm, gloo or hier);
//   4. writes .grad = sum / count, rounded once, the same bits on every rank.
// A rank with no micro-batch this step (it ran out of data: uneven inputs) still calls finish_step() and
// receives the others' mean, so every rank takes the same optimizer step and no final broadcast is needed.
//
// Floating-point buffers (BatchNorm's running statistics) are treated the same way: before each micro-batch
// they are put back to the step's starting values, after it their values are one more contribution, and the
// step ends with their exact mean: one running-statistics update per step with the mean of the micro-batch
// statistics (for BatchNorm's update rule, linear in the statistic), whichever rank saw which micro-batch.
//
// Cost: two all-reduces per step (int32 per block of `block` elements, then int64 per element: twice the
// bytes of a float32 all-reduce), no overlap with backward, and one held gradient copy per local
// micro-batch until the step ends.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/distributed/process_group.h"
#include "runtime/tensor/tensor.h"

namespace ddp {

struct DeterministicOptions {
  // Micro-batches per step over all ranks: the bound on contributions that sizes the fixed point's headroom.
  int64_t micro_batches = 1;
  // Elements per exponent block.
  int64_t block = 256;
};

class DeterministicReduction {
 public:
  // `params`: the parameters whose .grad is reduced (every rank the same list in the same order); `buffers`:
  // the floating-point buffers averaged the same way (others are skipped). CPU tensors of float32 or
  // float64.
  DeterministicReduction(std::vector<Tensor> params, std::vector<Tensor> buffers,
                         std::shared_ptr<dist::ProcessGroup> pg, DeterministicOptions options);

  // Before each micro-batch's forward: the buffers back to the step's starting values.
  void before_micro_batch();
  // After each micro-batch's backward: its gradients (moved out of .grad, which is left none) and buffers.
  void end_micro_batch();
  // Collective: every rank calls it once per step, also with no micro-batch of its own. Writes every
  // parameter's .grad (the mean; a parameter that got a gradient in no micro-batch of any rank keeps .grad
  // none, as DDP leaves a parameter no rank used) and the buffers.
  // Returns the number of micro-batches of the step over all ranks (0: nobody had one; nothing written).
  int64_t finish_step();

  // Bytes this rank handed to the all-reduces in the last finish_step (exponents + integers + count).
  int64_t bytes_last_step() const { return bytes_last_step_; }

 private:
  struct Segment {  // one tensor's place in the flat exponent and integer vectors
    int64_t numel = 0, block_offset = 0, element_offset = 0;
  };
  std::vector<Tensor> params_, buffers_;
  std::shared_ptr<dist::ProcessGroup> pg_;
  DeterministicOptions options_;
  int headroom_ = 1;
  std::vector<Segment> segments_;  // params then buffers
  int64_t total_blocks_ = 0, total_elements_ = 0;
  std::vector<Tensor> step_start_buffers_;  // the buffers' values when the step began (empty: not begun)
  std::vector<std::vector<Tensor>> grads_;  // per local micro-batch: one tensor per parameter (undefined: none)
  std::vector<std::vector<Tensor>> buffer_values_;  // per local micro-batch: one tensor per buffer
  int64_t bytes_last_step_ = 0;
};

}  // namespace ddp
