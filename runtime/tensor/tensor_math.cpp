// tensor_math.cpp - CPU loops and CUDA dispatch of the in-place tensor arithmetic.
#include "runtime/tensor/tensor_math.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/axpy.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp {
namespace {
void check_pair(const char* what, const Tensor& dst, const Tensor& src) {
  DDP_CHECK(dst.numel() == src.numel(), what, ": ", shape_str(dst.shape()), " vs ", shape_str(src.shape()));
  DDP_CHECK(dst.dtype() == src.dtype(), what, ": dtype ", dtype_name(dst.dtype()), " vs ",
            dtype_name(src.dtype()));
  DDP_CHECK(dst.device() == src.device(), what, ": device ", dst.device().str(), " vs ", src.device().str());
}
}  // namespace

void add_(Tensor& dst, const Tensor& src, double alpha) {
  check_pair("add_", dst, src);
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda()) {
    kernels::cuda::axpby(dst.raw_data(), src.raw_data(), dst.dtype(), 1.0, alpha, dst.numel(),
                         cuda::current_stream());
    return;
  }
#endif
  DDP_DISPATCH_FLOATING(dst.dtype(), "add_", [&] {
    scalar_t* d = dst.data<scalar_t>();
    const scalar_t* s = src.data<scalar_t>();
    const scalar_t a = static_cast<scalar_t>(alpha);
    const int64_t n = dst.numel();
    if (alpha == 1.0)
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    else
      for (int64_t i = 0; i < n; ++i) d[i] += a * s[i];
  });
}

void scale_(Tensor& dst, double s) {
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda()) {
    kernels::cuda::axpby(dst.raw_data(), dst.raw_data(), dst.dtype(), 0.0, s, dst.numel(),
                         cuda::current_stream());
    return;
  }
#endif
  DDP_DISPATCH_FLOATING(dst.dtype(), "scale_", [&] {
    scalar_t* d = dst.data<scalar_t>();
    const scalar_t a = static_cast<scalar_t>(s);
    for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] *= a;
  });
}

void copy_scaled_(Tensor& dst, const Tensor& src, double s) {
  check_pair("copy_scaled_", dst, src);
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda()) {
    kernels::cuda::axpby(dst.raw_data(), src.raw_data(), dst.dtype(), 0.0, s, dst.numel(),
                         cuda::current_stream());
    return;
  }
#endif
  DDP_DISPATCH_FLOATING(dst.dtype(), "copy_scaled_", [&] {
    scalar_t* d = dst.data<scalar_t>();
    const scalar_t* x = src.data<scalar_t>();
    const scalar_t a = static_cast<scalar_t>(s);
    if (s == 1.0)
      std::copy(x, x + dst.numel(), d);
    else
      for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] = a * x[i];
  });
}

double sum_of_squares(const Tensor& t) {
  Tensor c = t.device().is_cpu() ? t : t.to(Device::cpu());
  return DDP_DISPATCH_FLOATING(c.dtype(), "sum_of_squares", [&] {
    const scalar_t* x = c.data<scalar_t>();
    double acc = 0;
    for (int64_t i = 0, n = c.numel(); i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
    return acc;
  });
}

}  // namespace ddp
