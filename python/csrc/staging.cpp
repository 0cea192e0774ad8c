// staging.cpp - how a torch tensor and a c10d reduce op become what ddp.cpp's shm group moves: the travel
// dtype, the checks with errors naming the collective and the fix, the CommBuffer, and the reduce-op plan.
#include "staging.h"

#include <c10/util/Exception.h>

namespace ddp_torch {

namespace dist = ddp::dist;


std::optional<ddp::DType> native_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ddp::DType::F32;
    case at::kDouble:
      return ddp::DType::F64;
    case at::kBFloat16:
      return ddp::DType::BF16;
    case at::kInt:
      return ddp::DType::I32;
    case at::kLong:
      return ddp::DType::I64;
    default:
      return std::nullopt;
  }
}

// "torch.float32": the name Python users write.
std::string py_name(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

// The dtype a tensor travels in: its own when ddp.cpp moves it, else a wider one that holds every value.
at::ScalarType travel_dtype(at::ScalarType t, const char* name) {
  if (native_dtype(t)) return t;
  switch (t) {
    case at::kHalf:
      return at::kFloat;
    case at::kBool:
    case at::kByte:
    case at::kChar:
    case at::kShort:
      return at::kInt;
    default:
      TORCH_CHECK_VALUE(false, "ddpcpp: ", name, " got a tensor of dtype ", py_name(t),
                        ", which the ddpcpp backend does not move; it moves float32, float64, bfloat16, float16, "
                        "int64, int32, int16, int8, uint8 and bool. Convert the tensor, or use gloo for this "
                        "group (dist.new_group(backend='gloo'))");
  }
}

void check_tensor(const at::Tensor& t, const char* name, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), "ddpcpp: ", name, ": ", what, " is an undefined tensor");
  TORCH_CHECK_VALUE(t.device().is_cpu(), "ddpcpp: ", name, ": ", what, " is on ", t.device(),
                    " but the ddpcpp backend moves CPU tensors; for GPU tensors use "
                    "init_process_group('cpu:ddpcpp,cuda:nccl') so that CUDA tensors go to NCCL");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "ddpcpp: ", name, ": ", what, " has layout ", t.layout(),
                    "; the ddpcpp backend moves dense (strided) tensors only - call .to_dense() first");
  travel_dtype(t.scalar_type(), name);
}

// The two tensors of an all-gather or reduce-scatter: CPU, dense, one dtype, `big` world times `small`.
void check_pair(const char* name, const at::Tensor& big, const char* big_name, const at::Tensor& small,
                const char* small_name, int world) {
  check_tensor(big, name, big_name);
  check_tensor(small, name, small_name);
  TORCH_CHECK_VALUE(big.scalar_type() == small.scalar_type(), "ddpcpp: ", name, ": the ", big_name, " is ",
                    py_name(big.scalar_type()), " but the ", small_name, " is ", py_name(small.scalar_type()),
                    "; expected the same dtype");
  TORCH_CHECK_VALUE(big.numel() == world * small.numel(), "ddpcpp: ", name, ": the ", big_name, " has ",
                    big.numel(), " elements; expected world size ", world, " x the ", small_name, "'s ",
                    small.numel(), " = ", world * small.numel());
}

// The contiguous tensor in the travel dtype that the collective reads and writes: `t` itself when it already is
// one, else a copy (with_values: the copy holds t's values; else it is only allocated).
at::Tensor travel_tensor(const at::Tensor& t, const char* name, bool with_values) {
  const at::ScalarType d = travel_dtype(t.scalar_type(), name);
  if (d == t.scalar_type() && t.is_contiguous()) return t;
  if (!with_values) return at::empty({t.numel()}, t.options().dtype(d));
  return t.to(d).contiguous();
}

bool is_staged(const at::Tensor& comm, const at::Tensor& t) { return !comm.is_same(t); }

dist::CommBuffer buffer(const at::Tensor& t) {
  auto keep = std::make_shared<at::Tensor>(t);
  return dist::CommBuffer{t.numel() ? t.data_ptr() : nullptr, t.numel(), *native_dtype(t.scalar_type()),
                          ddp::Device::cpu(), std::shared_ptr<void>(keep, keep.get())};
}

OpPlan plan_for(const c10d::ReduceOp& op, at::ScalarType dtype, const char* name) {
  OpPlan p;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      p.op = dist::ReduceOp::Sum;
      return p;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_VALUE(at::isFloatingType(dtype), "ddpcpp: ", name, " with ReduceOp.AVG on a ", py_name(dtype),
                        " tensor: AVG needs a floating-point tensor (use SUM and divide yourself)");
      p.op = dist::ReduceOp::Avg;
      return p;
    case c10d::ReduceOp::MIN:
      p.op = dist::ReduceOp::Min;
      return p;
    case c10d::ReduceOp::MAX:
      p.op = dist::ReduceOp::Max;
      return p;
    case c10d::ReduceOp::PREMUL_SUM: {
      p.kind = OpPlan::Premul;
      auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK_VALUE(s != nullptr, "ddpcpp: ", name, " with PREMUL_SUM but no factor was given");
      if (s->tensor_factor.defined()) {
        p.factor_tensor = s->tensor_factor;
      } else {
        p.factor = s->double_factor;
      }
      return p;
    }
    case c10d::ReduceOp::PRODUCT:
      p.kind = OpPlan::Fold;
      p.fold = op.op_;
      return p;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK_VALUE(!at::isFloatingType(dtype), "ddpcpp: ", name,
                        " with a bitwise reduce op on a floating-point tensor (", py_name(dtype),
                        "); BAND, BOR and BXOR need integer or bool tensors");
      p.kind = OpPlan::Fold;
      p.fold = op.op_;
      return p;
    default:
      TORCH_CHECK_VALUE(false, "ddpcpp: ", name, ": reduce op ", static_cast<int>(op.op_),
                        " is not supported; use SUM, AVG, MIN, MAX, PRODUCT, PREMUL_SUM, BAND, BOR or BXOR");
  }
}

void fold_into(at::Tensor& acc, const at::Tensor& x, c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::PRODUCT:
      acc.mul_(x);
      return;
    case c10d::ReduceOp::BAND:
      acc.bitwise_and_(x);
      return;
    case c10d::ReduceOp::BOR:
      acc.bitwise_or_(x);
      return;
    default:
      acc.bitwise_xor_(x);
  }
}

// Scales `t` (a tensor of our own) by the PREMUL_SUM factor.
void premultiply(at::Tensor& t, const OpPlan& p) {
  if (p.factor_tensor.defined()) {
    t.mul_(p.factor_tensor.to(t.scalar_type()));
  } else {
    t.mul_(*p.factor);
  }
}

}  // namespace ddp_torch
