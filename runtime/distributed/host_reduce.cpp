// host_reduce.cpp - typed element-wise loops behind host_reduce_fn().
#include "runtime/distributed/host_reduce.h"

#include <algorithm>
#include <cstdint>

#include "runtime/core/error.h"

namespace ddp::dist {

namespace {
template <class T, class F>
HostReduceFn typed(F f) {
  return [f](void* out, const void* a, const void* b, size_t n) {
    T* o = static_cast<T*>(out);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    for (size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
  };
}

template <class T>
HostReduceFn for_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return typed<T>([](T a, T b) { return static_cast<T>(a + b); });
    case ReduceOp::Max:
      return typed<T>([](T a, T b) { return std::max(a, b); });
    case ReduceOp::Min:
      return typed<T>([](T a, T b) { return std::min(a, b); });
  }
  return {};
}

HostReduceFn bf16_for_op(ReduceOp op) {
  auto through_float = [](auto f) {
    return typed<BFloat16>(
        [f](BFloat16 a, BFloat16 b) { return BFloat16::from_float(f(a.to_float(), b.to_float())); });
  };
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return through_float([](float a, float b) { return a + b; });
    case ReduceOp::Max:
      return through_float([](float a, float b) { return std::max(a, b); });
    case ReduceOp::Min:
      return through_float([](float a, float b) { return std::min(a, b); });
  }
  return {};
}

template <class T>
void divide(void* data, size_t n, int divisor) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(divisor));
}
}  // namespace

HostReduceFn host_reduce_fn(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::F32:
      return for_op<float>(op);
    case DType::F64:
      return for_op<double>(op);
    case DType::I32:
      return for_op<int32_t>(op);
    case DType::I64:
      return for_op<int64_t>(op);
    case DType::BF16:
      return bf16_for_op(op);
    case DType::U8:
      break;
  }
  DDP_FAIL("no host reduction for dtype ", dtype_name(dtype),
           ": expected float32, float64, bfloat16, int32 or int64");
}

void divide_in_place(void* data, size_t n, DType dtype, int divisor) {
  switch (dtype) {
    case DType::F32:
      return divide<float>(data, n, divisor);
    case DType::F64:
      return divide<double>(data, n, divisor);
    case DType::I32:
      return divide<int32_t>(data, n, divisor);
    case DType::I64:
      return divide<int64_t>(data, n, divisor);
    case DType::BF16: {
      auto* p = static_cast<BFloat16*>(data);
      for (size_t i = 0; i < n; ++i)
        p[i] = BFloat16::from_float(p[i].to_float() / static_cast<float>(divisor));
      return;
    }
    case DType::U8:
      break;
  }
  DDP_FAIL("cannot average dtype ", dtype_name(dtype));
}

}  // namespace ddp::dist
