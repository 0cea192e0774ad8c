// staging.h - the tensor side of the ddpcpp backend (backend.cpp): which dtypes ddp.cpp moves as they are and
// which travel in a wider one (float16 as float32; bool, uint8, int8, int16 as int32), the checks every tensor
// passes (CPU, dense, a dtype it moves), the contiguous travel copy, the CommBuffer over a tensor, and how each
// c10d reduce op runs (directly, pre-multiplied then summed, or all-gathered and folded in rank order).
#pragma once
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>

#include "runtime/distributed/comm_buffer.h"
#include "runtime/distributed/process_group.h"

namespace ddp_torch {

// The ddp.cpp dtype of a torch dtype ddp.cpp moves as it is; nullopt for the others.
std::optional<ddp::DType> native_dtype(at::ScalarType t);
// "torch.float32": the name Python users write.
std::string py_name(at::ScalarType t);
// The dtype a tensor travels in; a ValueError naming the collective for dtypes the backend does not move.
at::ScalarType travel_dtype(at::ScalarType t, const char* name);
// A CPU, dense tensor of a dtype the backend moves, else a ValueError naming the collective and the fix.
void check_tensor(const at::Tensor& t, const char* name, const char* what);
// The two tensors of an all-gather or reduce-scatter: checked, one dtype, `big` world times `small`.
void check_pair(const char* name, const at::Tensor& big, const char* big_name, const at::Tensor& small,
                const char* small_name, int world);
// The contiguous tensor in the travel dtype the collective reads and writes: `t` itself when it already is one,
// else a copy (with_values: holding t's values; else only allocated).
at::Tensor travel_tensor(const at::Tensor& t, const char* name, bool with_values = true);
bool is_staged(const at::Tensor& comm, const at::Tensor& t);
// A CommBuffer over a travel tensor, keeping it alive while the collective uses it.
ddp::dist::CommBuffer buffer(const at::Tensor& t);

// How a c10d reduce op runs.
struct OpPlan {
  enum Kind { Direct, Premul, Fold } kind = Direct;
  ddp::dist::ReduceOp op = ddp::dist::ReduceOp::Sum;  // Direct
  c10d::ReduceOp::RedOpType fold = c10d::ReduceOp::PRODUCT;  // Fold
  std::optional<double> factor;  // Premul
  at::Tensor factor_tensor;      // Premul
};
OpPlan plan_for(const c10d::ReduceOp& op, at::ScalarType dtype, const char* name);
// acc = acc (op) x, for the folded ops (PRODUCT, BAND, BOR, BXOR).
void fold_into(at::Tensor& acc, const at::Tensor& x, c10d::ReduceOp::RedOpType op);
// Scales `t` (a tensor of our own) by the PREMUL_SUM factor.
void premultiply(at::Tensor& t, const OpPlan& p);

}  // namespace ddp_torch
