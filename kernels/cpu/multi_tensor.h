// multi_tensor.h - how a list of tensors becomes multi-tensor launches, and the CPU twin of the device's
// chunked sum of squares.
//
// A multi-tensor kernel (kernels/cuda/multi_tensor.cu) takes a table of tensors (pointers, lengths,
// per-tensor scalars) as its kernel argument and maps each block to one (tensor, chunk) pair: block b of a
// launch works on elements [chunk * kMultiTensorChunk, (chunk + 1) * kMultiTensorChunk) of the tensor in
// table slot blocks[b].slot. A kernel argument has room for a bounded table (max_tensors slots, max_blocks
// blocks), so a long list is split over several launches; a tensor whose chunks do not all fit continues in
// the next launch (it then has a slot in both). Empty tensors get no slot and no block. The plan is a host
// function, the same on every run for the same sizes, so anything ordered by it (the sum of squares'
// per-block partials) is too.
#pragma once
#include <cstdint>
#include <vector>

namespace ddp::kernels::cpu {

constexpr int64_t kMultiTensorChunk = 16384;  // elements one block handles
constexpr int kMultiTensorThreads = 256;      // threads of a multi-tensor block (a power of two)

struct MultiTensorBlock {
  int32_t slot;   // index into MultiTensorLaunch::tensors
  int32_t chunk;  // which chunk of that tensor
};

struct MultiTensorLaunch {
  std::vector<int64_t> tensors;          // indices into the planned list, one per table slot, in list order
  std::vector<MultiTensorBlock> blocks;  // in list order, chunks ascending
  int64_t first_block = 0;               // index of blocks[0] among all blocks of the plan
};

// The launches for tensors of `sizes` elements (in list order). chunk > 0, max_tensors >= 1, max_blocks >= 1;
// a size < 0 or a chunk count past int32 raises an error naming the tensor.
std::vector<MultiTensorLaunch> plan_multi_tensor(const std::vector<int64_t>& sizes, int64_t chunk,
                                                 int max_tensors, int max_blocks);
// All blocks of a plan (the length of the sum of squares' partials).
int64_t plan_block_count(const std::vector<MultiTensorLaunch>& plan);

// The fixed-order reduction of one block, as the device runs it: thread t of kMultiTensorThreads accumulates
// values[t], values[t + threads], ... in order with `add(acc, value)`, then a tree halves the threads
// (acc[t] += acc[t + s] for s = threads/2, ..., 1). Both the per-chunk partials and the final sum over the
// partials use it; so the CPU twin below gives the device's bits.
template <class Value, class Add>
double block_reduce_in_fixed_order(int64_t count, const Value& value, const Add& add) {
  double acc[kMultiTensorThreads] = {};
  for (int t = 0; t < kMultiTensorThreads; ++t)
    for (int64_t i = t; i < count; i += kMultiTensorThreads) acc[t] = add(acc[t], value(i));
  for (int s = kMultiTensorThreads / 2; s > 0; s /= 2)
    for (int t = 0; t < s; ++t) acc[t] += acc[t + s];
  return acc[0];
}

// The CPU twin of kernels/cuda/multi_tensor.cu's sum of squares over a list of float32 / float64 tensors: the
// same plan (the given capacities, kMultiTensorChunk), per block fma(x, x, acc) in double in the block's
// fixed order, then the partials summed in block order by the same fixed-order reduction. The GPU's result
// equals this one bit for bit; it differs from a plain running sum (ddp::sum_of_squares) in rounding only.
template <class T>
double chunked_sum_of_squares(const std::vector<const T*>& data, const std::vector<int64_t>& sizes,
                              int max_tensors, int max_blocks);

}  // namespace ddp::kernels::cpu
