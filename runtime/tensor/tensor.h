// tensor.h - the Tensor: an N-dimensional, row-major, contiguous view of a ref-counted Storage, plus the
// autograd fields (requires_grad, grad, grad_fn). Views are made only where they are free: reshape of the
// whole tensor and a slice along the first dimension; everything else (transpose, permute) copies.
//
// A Tensor is a handle: copying it shares the same TensorImpl. Ops live in runtime/ops/; this file holds
// construction, metadata, element access and device/dtype conversion only (no autograd recording).
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/tensor/storage.h"

namespace ddp {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

class Tensor;
namespace autograd {
class Node;
}

// The shared state behind Tensor handles.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  // The device of a tensor without storage (a ZeRO-3 parameter at rest: release_storage in storageless.h):
  // it keeps the device its memory was on, so code that sizes or places buffers after it (the shard of its
  // gradient, say) does not fall back to the CPU.
  Device device_at_rest = Device::cpu();
  int64_t offset = 0;  // in elements
  Shape shape;
  DType dtype = DType::F32;
  // ---- autograd ----
  bool requires_grad = false;                      // set on leaves (parameters, inputs under gradcheck)
  std::shared_ptr<autograd::Node> grad_fn;         // the node that produced this tensor (non-leaf)
  uint32_t output_nr = 0;                          // which output of grad_fn this is
  std::shared_ptr<TensorImpl> grad;                // accumulated gradient of a leaf; null = none
  std::weak_ptr<autograd::Node> grad_accumulator;  // the leaf's AccumulateGrad node, while a graph holds it
  // Called after this leaf's gradient is fully accumulated in a backward (once per backward, after all uses),
  // each with the key of its owner (so an owner can remove its own hooks). Empty for tensors nobody listens
  // to: then the cost is one empty-vector check.
  using PostAccumulateHook = std::function<void(TensorImpl&)>;
  std::vector<std::pair<const void*, PostAccumulateHook>> post_accumulate_hooks;
  void add_post_accumulate_hook(const void* owner, PostAccumulateHook h) {
    post_accumulate_hooks.emplace_back(owner, std::move(h));
  }
  void remove_post_accumulate_hooks(const void* owner) {
    std::erase_if(post_accumulate_hooks, [owner](const auto& e) { return e.first == owner; });
  }
  // Where this leaf's next gradient may be written directly while it has no .grad, with the key of its owner:
  // the DDP reducer with gradient_as_bucket_view returns the parameter's slot in its bucket, so linear's
  // backward computes the weight and bias gradients straight into the bucket and no copy follows
  // (autograd::gradient_destination says when it may be used). Empty: none.
  using GradDestination = std::function<std::shared_ptr<TensorImpl>()>;
  std::pair<const void*, GradDestination> grad_destination{nullptr, {}};
  std::string name;  // optional, for error messages and traces
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- construction ----
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     Device device = Device::cpu());
  // Standard normal / uniform [lo, hi) from a seeded generator (same seed -> same values on every machine).
  static Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::F32, double stddev = 1.0);
  static Tensor uniform(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype = DType::F32);
  // 0, 1, ..., n - 1, made where it lives (a kernel on a GPU: no host copy).
  static Tensor arange(int64_t n, DType dtype = DType::I64, Device device = Device::cpu());
  // Copies host values (converted to dtype) into a new CPU tensor.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F32);
  template <class T>
  static Tensor from_data(const std::vector<T>& values, const Shape& shape) {
    DDP_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_data: ", values.size(),
              " values for shape ", shape_str(shape));
    Tensor t = empty(shape, dtype_of<T>::value);
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }
  static Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }
  static Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int64_t dim() const { return static_cast<int64_t>(impl_->shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl_->shape); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage ? impl_->storage->device() : impl_->device_at_rest; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  std::string str(int64_t max_elems = 8) const;  // "Tensor[float32 cpu (2, 3)] {..}"

  // ---- data ----
  void* raw_data() const {
    if (!impl_->storage) [[unlikely]]
      return data_of_storageless();
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * dtype_size(dtype());
  }
  template <class T>
  T* data() const {
    DDP_CHECK(dtype_of<T>::value == dtype(), "data<", dtype_name(dtype_of<T>::value), ">() on a ",
              dtype_name(dtype()), " tensor");
    return static_cast<T*>(raw_data());
  }
  // CPU copies of the values as double (works for any dtype and device).
  std::vector<double> to_double_vector() const;
  // The only element of a one-element tensor, as double. On a GPU the read waits for the device, and then
  // this thread's pending device-side index checks are raised (ddp::check_device_errors, device_checks.h).
  double item() const;

  // ---- views and copies (no autograd; see ops:: for differentiable versions) ----
  Tensor view(const Shape& shape) const;            // same storage, new shape (one dimension may be -1)
  Tensor slice0(int64_t begin, int64_t end) const;  // rows [begin, end) of the first dimension, same storage
  Tensor clone() const;                             // new storage, same device and dtype
  Tensor to(Device device) const;                   // copy to device (self when already there)
  Tensor to(DType dtype) const;                     // converted copy (self when already that dtype)
  void copy_from(const Tensor& src);                // same shape; any device/dtype
  void fill_(double value);
  void zero_();

  // ---- autograd ----
  bool requires_grad() const { return impl_->requires_grad || impl_->grad_fn != nullptr; }
  Tensor& set_requires_grad(bool r);  // only on leaves (defined in runtime/autograd/tensor_autograd.cpp)
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl_->grad_fn; }
  Tensor detach() const;  // shares storage, no history, requires_grad false
  const std::string& name() const { return impl_->name; }
  Tensor& set_name(std::string n) {
    impl_->name = std::move(n);
    return *this;
  }

  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  // nullptr for an empty tensor; otherwise an error naming the tensor: its memory was released (a ZeRO-3
  // parameter outside its unit's forward and backward, runtime/ddp/sharded/).
  void* data_of_storageless() const;
  std::shared_ptr<TensorImpl> impl_;
};

// Calls f with T = float or double by the tensor's dtype; other dtypes are an error naming `what`.
#define DDP_DISPATCH_FLOATING(dtype, what, ...)                                                      \
  [&] {                                                                                              \
    switch (dtype) {                                                                                 \
      case ::ddp::DType::F32: {                                                                      \
        using scalar_t = float;                                                                      \
        return __VA_ARGS__();                                                                        \
      }                                                                                              \
      case ::ddp::DType::F64: {                                                                      \
        using scalar_t = double;                                                                     \
        return __VA_ARGS__();                                                                        \
      }                                                                                              \
      default:                                                                                       \
        DDP_FAIL(what, ": dtype ", ::ddp::dtype_name(dtype), " not supported (float32 or float64)"); \
    }                                                                                                \
  }()

}  // namespace ddp
