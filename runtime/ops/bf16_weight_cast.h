// bf16_weight_cast.h - one bf16 copy of each weight per optimizer step instead of one per use. In bf16
// mixed precision (mixed_precision.h) every linear (and matmul with a parameter operand) rounds its float32
// weight to a bf16 tensor. A weight used more than once in a step is converted each time: every micro-batch
// of gradient accumulation, every recompute of activation checkpointing, the tied GPT head (the token
// embedding's weight). While a Bf16WeightCast scope is open on a thread, ops::bf16_weight hands out one bf16
// copy per weight and reuses it for the rest of the scope; without a scope bf16_weight is to_bf16.
//
// What is cached: leaf tensors that require a gradient (parameters; the values an optimizer owns), keyed by
// their storage, element offset and shape. Other tensors (activations, a weight computed in the step, a
// frozen weight) are converted on every call, as without a scope. Copies are made lazily, at a weight's first
// use in the scope, so a parameter the step never uses costs nothing.
//
// The contract: the cached weights do not change while the scope is open. A scope spans the forward and
// backward passes of one optimizer step (models/train_step.cpp opens it around all micro-batches and closes
// it before clipping and the optimizer step) and never an optimizer step itself: the optimizers' step()
// raises an error when called inside an open scope on its thread. Changing a cached weight in place inside a
// scope by other means (a copy_ into a parameter, a checkpoint load) is the caller's error: later uses in the
// scope would see the old values.
//
// Scopes nest: an inner scope starts with no copies of its own and the outer one's cache is back when it
// closes. Bf16WeightCast(false) opens a scope without caching (bf16_weight is to_bf16 inside it), for callers
// that decide at run time (ZeRO-3 frees gathered parameters after each use; caching would keep bf16 copies of
// all of them for the whole step). DDP_BF16_WEIGHT_CACHE=0 makes every scope a non-caching one (each use converts,
// bitwise the same results: the reference the tests compare with).
#pragma once
#include <cstdint>
#include <memory>

#include "runtime/tensor/tensor.h"

namespace ddp::ops {

class Bf16WeightCast {
 public:
  explicit Bf16WeightCast(bool on = true);
  ~Bf16WeightCast();
  Bf16WeightCast(const Bf16WeightCast&) = delete;
  Bf16WeightCast& operator=(const Bf16WeightCast&) = delete;

  struct Cache;  // the copies of one scope (bf16_weight_cast.cpp)

 private:
  std::unique_ptr<Cache> cache_;  // null for a scope that does not cache
  Cache* outer_;
};

// True while a caching Bf16WeightCast scope is open on this thread (the innermost one caches).
bool bf16_weight_cast_active();

// The bf16 copy of a float32 weight: the scope's copy when one is open and w is a parameter (see above),
// else a fresh to_bf16(w). No autograd (the bf16 ops save it for their backward themselves).
Tensor bf16_weight(const Tensor& w);

// Raises an error naming `who` when a caching scope is open on this thread: an optimizer step there would
// change the weights the scope holds copies of. The optimizers call it at the start of step().
void check_no_bf16_weight_cast(const char* who);

namespace detail {
// How many float32 -> bf16 weight conversions bf16_weight has made in this process (cache hits do not
// count): a test's probe that a step converts each weight once.
int64_t bf16_weight_casts();
}  // namespace detail

}  // namespace ddp::ops
