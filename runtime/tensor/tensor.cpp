// tensor.cpp - construction, views, copies and conversions of Tensor (no autograd recording here).
#include "runtime/tensor/tensor.h"

#include "kernels/cpu/convert.h"
#include "runtime/tensor/device_checks.h"
#include "runtime/tensor/storageless.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/convert.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  if (s.size() == 1) os << ",";
  os << ")";
  return os.str();
}

namespace {
// Converts n elements between host buffers of any two dtypes.
template <class Dst>
Dst cast_from(const void* src, DType st, int64_t i) {
  switch (st) {
    case DType::F32:
      return static_cast<Dst>(static_cast<const float*>(src)[i]);
    case DType::F64:
      return static_cast<Dst>(static_cast<const double*>(src)[i]);
    case DType::BF16:
      return static_cast<Dst>(static_cast<const BFloat16*>(src)[i].to_float());
    case DType::I32:
      return static_cast<Dst>(static_cast<const int32_t*>(src)[i]);
    case DType::I64:
      return static_cast<Dst>(static_cast<const int64_t*>(src)[i]);
    case DType::U8:
      return static_cast<Dst>(static_cast<const uint8_t*>(src)[i]);
  }
  return Dst{};
}
void host_convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
  if (kernels::cpu::convert(src, st, dst, dt, n)) return;  // float32 <-> float64 / bfloat16, vectorized
  for (int64_t i = 0; i < n; ++i) {
    switch (dt) {
      case DType::F32:
        static_cast<float*>(dst)[i] = cast_from<float>(src, st, i);
        break;
      case DType::F64:
        static_cast<double*>(dst)[i] = cast_from<double>(src, st, i);
        break;
      case DType::BF16:
        static_cast<BFloat16*>(dst)[i] = BFloat16::from_float(cast_from<float>(src, st, i));
        break;
      case DType::I32:
        static_cast<int32_t*>(dst)[i] = cast_from<int32_t>(src, st, i);
        break;
      case DType::I64:
        static_cast<int64_t*>(dst)[i] = cast_from<int64_t>(src, st, i);
        break;
      case DType::U8:
        static_cast<uint8_t*>(dst)[i] = cast_from<uint8_t>(src, st, i);
        break;
    }
  }
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) DDP_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage = Storage::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}
Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::randn(const Shape& shape, uint64_t seed, DType dtype, double stddev) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& x : v) x = dist(gen);
  return from_vector(v, shape, dtype);
}

Tensor Tensor::uniform(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& x : v) x = dist(gen);
  return from_vector(v, shape, dtype);
}

Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  DDP_CHECK(n >= 0, "arange: n = ", n, " must not be negative");
#ifdef DDP_WITH_CUDA
  if (device.is_cuda()) {
    Tensor t = empty({n}, dtype, device);
    kernels::cuda::arange(t.raw_data(), dtype, n, cuda::current_stream());
    return t;
  }
#endif
  if (!device.is_cpu()) return arange(n, dtype).to(device);  // the build's own error for a GPU
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return from_vector(v, {n}, dtype);
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  DDP_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
            " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  host_convert(values.data(), DType::F64, t.raw_data(), dtype, t.numel());
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  DDP_CHECK(d >= 0 && d < n, "dimension ", d, " out of range for a tensor of shape ", shape_str(shape()));
  return impl_->shape[d];
}

std::vector<double> Tensor::to_double_vector() const {
  Tensor c = device().is_cpu() ? *this : to(Device::cpu());
  std::vector<double> out(static_cast<size_t>(numel()));
  host_convert(c.raw_data(), dtype(), out.data(), DType::F64, numel());
  return out;
}

double Tensor::item() const {
  DDP_CHECK(numel() == 1, "item() on a tensor of shape ", shape_str(shape()),
            "; it needs exactly one element");
  const double value = to_double_vector()[0];
  if (!device().is_cpu()) check_device_errors();  // the host has waited for the device already
  return value;
}

void* Tensor::data_of_storageless() const {
  if (numel() == 0) return nullptr;
  const std::string why = storageless_reason(impl_.get());
  DDP_CHECK(why.empty(), "tensor '", impl_->name.empty() ? std::string("(unnamed)") : impl_->name, "' ",
            shape_str(shape()), " has no memory: ", why);
  DDP_FAIL("tensor '", impl_->name.empty() ? std::string("(unnamed)") : impl_->name, "' ", shape_str(shape()),
           " has no memory: it is a ZeRO-3 parameter used outside its unit's forward and backward (sharded at "
           "rest). Call its module as module(x) - not module.forward(x) - so the unit's hooks gather it first, "
           "or gather it explicitly (ShardedDataParallel::gathered_parameters), or train with --zero 2");
}

std::string Tensor::str(int64_t max_elems) const {
  if (!defined()) return "Tensor[undefined]";
  std::ostringstream os;
  os << "Tensor[" << dtype_name(dtype()) << " " << device().str() << " " << shape_str(shape()) << "] {";
  auto v = to_double_vector();
  for (int64_t i = 0; i < numel() && i < max_elems; ++i) os << (i ? ", " : "") << v[i];
  if (numel() > max_elems) os << ", ...";
  os << "}";
  return os.str();
}

Tensor Tensor::view(const Shape& new_shape) const {
  Shape s = new_shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      DDP_CHECK(infer < 0, "view: only one dimension may be -1 in ", shape_str(new_shape));
      infer = static_cast<int64_t>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    DDP_CHECK(known > 0 && numel() % known == 0, "view: cannot infer -1 of ", shape_str(new_shape), " for ",
              numel(), " elements");
    s[infer] = numel() / known;
  }
  DDP_CHECK(shape_numel(s) == numel(), "view: shape ", shape_str(new_shape), " does not match ", numel(),
            " elements of ", shape_str(shape()));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = std::move(s);
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  DDP_CHECK(dim() >= 1, "slice0 on a scalar");
  DDP_CHECK(0 <= begin && begin <= end && end <= shape()[0], "slice0: rows [", begin, ", ", end,
            ") out of range for first dimension ", shape()[0]);
  int64_t row = dim() > 1 ? shape_numel(Shape(shape().begin() + 1, shape().end())) : 1;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset + begin * row;
  impl->shape = shape();
  impl->shape[0] = end - begin;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  detail::copy_bytes(t.raw_data(), device(), raw_data(), device(), nbytes(), false);
  return t;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Tensor t = empty(shape(), dtype(), d);
  detail::copy_bytes(t.raw_data(), d, raw_data(), device(), nbytes(), d.is_cpu());
  return t;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor t = empty(shape(), dt, device());
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  DDP_CHECK(src.numel() == numel(), "copy_from: source shape ", shape_str(src.shape()), " vs destination ",
            shape_str(shape()));
  if (src.dtype() == dtype()) {
    detail::copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes(), device().is_cpu());
    return;
  }
  if (device().is_cpu() && src.device().is_cpu()) {
    host_convert(src.raw_data(), src.dtype(), raw_data(), dtype(), numel());
    return;
  }
#ifdef DDP_WITH_CUDA
  Tensor s = src.device() == device() ? src : src.to(device());
  if (device().is_cuda()) {
    kernels::cuda::convert(s.raw_data(), s.dtype(), raw_data(), dtype(), numel(), cuda::current_stream());
    return;
  }
#endif
  Tensor host = src.to(Device::cpu());
  Tensor conv = host.to(dtype());
  copy_from(conv);
}

void Tensor::fill_(double value) {
  if (device().is_cpu()) {
    if (numel() == 0) return;
    host_convert(&value, DType::F64, raw_data(), dtype(), 1);  // the first element, converted once
    auto fill_as = [&](auto* p) { std::fill(p + 1, p + numel(), p[0]); };
    switch (dtype()) {
      case DType::F32:
        fill_as(static_cast<float*>(raw_data()));
        break;
      case DType::F64:
        fill_as(static_cast<double*>(raw_data()));
        break;
      case DType::BF16:
        fill_as(static_cast<uint16_t*>(raw_data()));
        break;
      case DType::I32:
        fill_as(static_cast<int32_t*>(raw_data()));
        break;
      case DType::I64:
        fill_as(static_cast<int64_t*>(raw_data()));
        break;
      case DType::U8:
        fill_as(static_cast<uint8_t*>(raw_data()));
        break;
    }
    return;
  }
#ifdef DDP_WITH_CUDA
  kernels::cuda::fill(raw_data(), dtype(), value, numel(), cuda::current_stream());
#endif
}

void Tensor::zero_() { detail::fill_bytes_zero(raw_data(), device(), nbytes()); }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

}  // namespace ddp
