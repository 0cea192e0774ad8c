// host_reduce.h - element-wise reductions on host memory for the Gloo backend: sum, max and min per dtype
// (bfloat16 computed in float32 and rounded back), and the division that turns a sum into an average.
#pragma once
#include <cstddef>
#include <functional>

#include "runtime/core/dtype.h"
#include "runtime/distributed/process_group.h"

namespace ddp::dist {

// out[i] = a[i] (op) b[i] for n elements; out may alias a or b. Avg reduces as Sum.
using HostReduceFn = std::function<void(void* out, const void* a, const void* b, size_t n)>;
HostReduceFn host_reduce_fn(DType dtype, ReduceOp op);

// data[i] /= divisor (integers truncate toward zero).
void divide_in_place(void* data, size_t n, DType dtype, int divisor);

}  // namespace ddp::dist
