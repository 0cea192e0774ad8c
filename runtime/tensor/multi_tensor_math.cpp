// multi_tensor_math.cpp - the list arithmetic of clipping: CPU loops over ddp::sum_of_squares / ddp::scale_,
// or the multi-tensor CUDA kernels grouped by dtype.
#include "runtime/tensor/multi_tensor_math.h"

#include <algorithm>
#include <cmath>

#include "runtime/tensor/tensor_math.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/multi_tensor.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp {
namespace {
void check_list(const char* who, const std::vector<Tensor>& tensors, Device device) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    DDP_CHECK(t.defined(), who, ": tensor ", i, " of the list is undefined; pass only defined tensors");
    DDP_CHECK(t.device() == device, who, ": tensor ", i, " is on ", t.device().str(), ", the list on ",
              device.str(), "; move every tensor of one list to one device");
    DDP_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, who, ": tensor ", i, " has dtype ",
              dtype_name(t.dtype()), "; float32 or float64 only");
  }
}
}  // namespace

Tensor sum_of_squares_tensor(const std::vector<Tensor>& tensors, Device device) {
  check_list("sum_of_squares_tensor", tensors, device);
#ifdef DDP_WITH_CUDA
  if (device.is_cuda()) {
    // The float32 tensors' partials, then the float64 tensors', each in list order: a fixed order.
    std::vector<const void*> data[2];
    std::vector<int64_t> sizes[2];
    for (const Tensor& t : tensors) {
      const int k = t.dtype() == DType::F64;
      data[k].push_back(t.raw_data());
      sizes[k].push_back(t.numel());
    }
    const int64_t count[2] = {kernels::cuda::sum_of_squares_partial_count(sizes[0]),
                              kernels::cuda::sum_of_squares_partial_count(sizes[1])};
    Tensor partials = Tensor::empty({std::max<int64_t>(1, count[0] + count[1])}, DType::F64, device);
    Tensor total = Tensor::empty({1}, DType::F64, device);
    cudaStream_t stream = cuda::current_stream();
    double* p = partials.data<double>();
    kernels::cuda::multi_tensor_sum_of_squares_partials(data[0], sizes[0], DType::F32, p, stream);
    kernels::cuda::multi_tensor_sum_of_squares_partials(data[1], sizes[1], DType::F64, p + count[0], stream);
    kernels::cuda::sum_partials(p, count[0] + count[1], total.data<double>(), stream);
    return total;
  }
#endif
  double total = 0;
  for (const Tensor& t : tensors) total += sum_of_squares(t);
  return Tensor::from_data<double>({total}, {1});
}

Tensor clip_by_sum_of_squares_(const std::vector<Tensor>& tensors, const Tensor& sum_of_squares,
                               double max_norm, Device device) {
  check_list("clip_by_sum_of_squares_", tensors, device);
  DDP_CHECK(sum_of_squares.defined() && sum_of_squares.numel() == 1 && sum_of_squares.dtype() == DType::F64 &&
                sum_of_squares.device() == device,
            "clip_by_sum_of_squares_: the sum of squares must be one float64 element on ", device.str(),
            " (got ", sum_of_squares.defined() ? shape_str(sum_of_squares.shape()) : std::string("undefined"),
            ")");
#ifdef DDP_WITH_CUDA
  if (device.is_cuda()) {
    Tensor norm = Tensor::empty({}, DType::F64, device);
    Tensor coefficient = Tensor::empty({1}, DType::F64, device);
    cudaStream_t stream = cuda::current_stream();
    kernels::cuda::clip_coefficient(sum_of_squares.data<double>(), max_norm, norm.data<double>(),
                                    coefficient.data<double>(), stream);
    for (DType dtype : {DType::F32, DType::F64}) {
      std::vector<void*> data;
      std::vector<int64_t> sizes;
      for (const Tensor& t : tensors)
        if (t.dtype() == dtype) {
          data.push_back(t.raw_data());
          sizes.push_back(t.numel());
        }
      kernels::cuda::multi_tensor_scale(data, sizes, dtype, coefficient.data<double>(), stream);
    }
    return norm;
  }
#endif
  const double norm = std::sqrt(sum_of_squares.data<double>()[0]);
  if (norm > max_norm && norm > 0) {
    const double scale = max_norm / (norm + 1e-6);
    for (const Tensor& t : tensors) {
      Tensor g = t;
      scale_(g, scale);
    }
  }
  return Tensor::from_data<double>({norm}, {});
}

}  // namespace ddp
