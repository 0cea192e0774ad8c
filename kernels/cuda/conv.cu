// conv.cu - cuDNN convolution: descriptors built per call (cheap), algorithm choice from the v7 heuristics
// cached per (device, dtype, geometry, TF32 switch) on each thread (core/float32_math.h: float32 without TF32 keeps
// the algorithms rated without tensor cores, run with FMA math), workspace from the caller's allocator.
#include <algorithm>
#include <array>
#include <iterator>
#include <map>

#include "kernels/cuda/conv.h"
#include "runtime/core/cuda/handles.h"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/float32_math.h"

namespace ddp::kernels::cuda {
namespace {

template <class T>
constexpr cudnnDataType_t cudnn_type() {
  return sizeof(T) == 4 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
}

// The five descriptors of one convolution; destroyed with the object.
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  ConvDescriptors() {
    try {
      DDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
      DDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
      DDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias));
      DDP_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
      DDP_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    } catch (...) {
      destroy();  // the destructor does not run for a throwing constructor
      throw;
    }
  }
  ~ConvDescriptors() { destroy(); }
  void destroy() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
    conv = nullptr;
    w = nullptr;
    bias = y = x = nullptr;
  }
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;

  void set(const ConvGeometry& g, cudnnDataType_t type) {
    DDP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, int(g.batch), int(g.in_channels),
                                               int(g.in_h), int(g.in_w)));
    DDP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, int(g.batch), int(g.out_channels),
                                               int(g.out_h), int(g.out_w)));
    DDP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, type, 1, int(g.out_channels), 1, 1));
    DDP_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, int(g.out_channels),
                                               int(g.in_channels), int(g.kernel_h), int(g.kernel_w)));
    DDP_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, int(g.padding), int(g.padding), int(g.stride),
                                                    int(g.stride), 1, 1, CUDNN_CROSS_CORRELATION, type));
  }
};

// The chosen algorithm of each direction and the math type (TF32 or not) it was rated with.
struct ConvAlgos {
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnMathType_t fwd_math;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnMathType_t bwd_data_math;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  cudnnMathType_t bwd_filter_math;
};

ConvMathType mirror(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_TENSOR_OP_MATH: return ConvMathType::TensorOp;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return ConvMathType::TensorOpAllowConversion;
    case CUDNN_FMA_MATH: return ConvMathType::Fma;
    default: return ConvMathType::Default;
  }
}
cudnnMathType_t to_cudnn(ConvMathType m) {
  switch (m) {
    case ConvMathType::TensorOp: return CUDNN_TENSOR_OP_MATH;
    case ConvMathType::TensorOpAllowConversion: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case ConvMathType::Fma: return CUDNN_FMA_MATH;
    default: return CUDNN_DEFAULT_MATH;
  }
}

// The algorithm to run and the math type to run it with.
template <class Algo>
struct Choice {
  Algo algo;
  cudnnMathType_t math;
};

// The first deterministic algorithm cuDNN's heuristics rate as usable (they come sorted by expected speed),
// else the first usable one; an algorithm rated with a math type the TF32 switch forbids (core/float32_math.h)
// is passed over.
template <class Perf>
auto first_usable(const Perf* perf, int count, const char* direction, cudnnDataType_t type)
    -> Choice<decltype(perf->algo)> {
  const bool is_float32 = type == CUDNN_DATA_FLOAT, allow_tf32 = cudnn_allow_tf32();
  // Deterministic algorithms first (same bits every run, as the bitwise resume needs), in cuDNN's order.
  for (bool need_deterministic : {true, false})
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (need_deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
      if (auto math = conv_math_for(mirror(perf[i].mathType), is_float32, allow_tf32))
        return {perf[i].algo, to_cudnn(*math)};
    }
  DDP_FAIL("conv2d: cuDNN offers no ", direction, " algorithm for this geometry",
           is_float32 && !allow_tf32 ? " without TF32 (set_cudnn_allow_tf32(true) / DDP_CUDNN_ALLOW_TF32=1)" : "");
}

ConvAlgos choose_algos(cudnnHandle_t handle, const ConvDescriptors& d, const ConvGeometry& g,
                       cudnnDataType_t type) {
  using Key = std::array<int64_t, 12>;  // device, dtype, then the geometry, then the TF32 switch
  thread_local std::map<Key, ConvAlgos> cache;
  Key key{ddp::cuda::current_device(), int64_t(type)};
  key[11] = cudnn_allow_tf32() ? 1 : 0;
  const int64_t sizes[] = {g.batch,    g.in_channels, g.in_h,   g.in_w,   g.out_channels,
                           g.kernel_h, g.kernel_w,    g.stride, g.padding};
  std::copy(std::begin(sizes), std::end(sizes), key.begin() + 2);
  if (auto it = cache.find(key); it != cache.end()) return it->second;

  ConvAlgos a;
  constexpr int kMaxAlgos = 16;
  int returned = 0;
  {
    cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
    DDP_CUDNN_CHECK(
        cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, kMaxAlgos, &returned, perf));
    const auto best = first_usable(perf, returned, "forward", type);
    a.fwd = best.algo;
    a.fwd_math = best.math;
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
    DDP_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, d.conv, d.x, kMaxAlgos,
                                                                &returned, perf));
    const auto best = first_usable(perf, returned, "backward-data", type);
    a.bwd_data = best.algo;
    a.bwd_data_math = best.math;
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
    DDP_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, d.conv, d.w, kMaxAlgos,
                                                                  &returned, perf));
    const auto best = first_usable(perf, returned, "backward-filter", type);
    a.bwd_filter = best.algo;
    a.bwd_filter_math = best.math;
  }
  cache.emplace(key, a);
  return a;
}

void* workspace_of(size_t bytes, const WorkspaceFn& workspace) {
  return bytes == 0 ? nullptr : workspace(bytes);
}

}  // namespace

template <class T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const ConvGeometry& g,
                    const WorkspaceFn& workspace) {
  if (g.batch * g.out_channels * g.out_h * g.out_w == 0) return;
  cudnnHandle_t handle = ddp::cuda::cudnn_handle();
  ConvDescriptors d;
  d.set(g, cudnn_type<T>());
  const ConvAlgos algos = choose_algos(handle, d, g, cudnn_type<T>());
  DDP_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, algos.fwd_math));
  size_t bytes = 0;
  DDP_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, d.x, d.w, d.conv, d.y, algos.fwd, &bytes));
  void* ws = workspace_of(bytes, workspace);
  const T one = 1, zero = 0;
  DDP_CUDNN_CHECK(
      cudnnConvolutionForward(handle, &one, d.x, x, d.w, w, d.conv, algos.fwd, ws, bytes, &zero, d.y, y));
  if (b) DDP_CUDNN_CHECK(cudnnAddTensor(handle, &one, d.bias, b, &one, d.y, y));
}

template <class T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const ConvGeometry& g,
                     const WorkspaceFn& workspace) {
  cudnnHandle_t handle = ddp::cuda::cudnn_handle();
  ConvDescriptors d;
  d.set(g, cudnn_type<T>());
  const ConvAlgos algos = choose_algos(handle, d, g, cudnn_type<T>());
  const T one = 1, zero = 0;
  if (dx) {
    DDP_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, algos.bwd_data_math));
    size_t bytes = 0;
    DDP_CUDNN_CHECK(
        cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.w, d.y, d.conv, d.x, algos.bwd_data, &bytes));
    void* ws = workspace_of(bytes, workspace);
    DDP_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, &one, d.w, w, d.y, dy, d.conv, algos.bwd_data, ws,
                                                 bytes, &zero, d.x, dx));
  }
  if (dw) {
    DDP_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, algos.bwd_filter_math));
    size_t bytes = 0;
    DDP_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, d.x, d.y, d.conv, d.w,
                                                                   algos.bwd_filter, &bytes));
    void* ws = workspace_of(bytes, workspace);
    DDP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, d.x, x, d.y, dy, d.conv, algos.bwd_filter,
                                                   ws, bytes, &zero, d.w, dw));
  }
  if (db) DDP_CUDNN_CHECK(cudnnConvolutionBackwardBias(handle, &one, d.y, dy, &zero, d.bias, db));
}

#define DDP_INSTANTIATE_CONV(T)                                                                   \
  template void conv2d_forward<T>(const T*, const T*, const T*, T*, const ConvGeometry&,          \
                                  const WorkspaceFn&);                                            \
  template void conv2d_backward<T>(const T*, const T*, const T*, T*, T*, T*, const ConvGeometry&, \
                                   const WorkspaceFn&);
DDP_INSTANTIATE_CONV(float)
DDP_INSTANTIATE_CONV(double)
#undef DDP_INSTANTIATE_CONV

}  // namespace ddp::kernels::cuda
