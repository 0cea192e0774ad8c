// conv.h - 2-D convolution on the CPU over raw NCHW pointers: im2col + OpenBLAS GEMM per image for the
// forward, GEMM with the column matrix for the weight gradient and GEMM + col2im for the input gradient.
// ConvGeometry is also the argument of the CUDA kernels of the same names (kernels/cuda/conv.h).
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// Sizes of one convolution; out_h/out_w follow from the others (see conv_output_size).
struct ConvGeometry {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride = 1, padding = 0;
  int64_t out_h = 0, out_w = 0;
  int64_t col_rows() const { return in_channels * kernel_h * kernel_w; }  // K of the GEMM
  int64_t out_pixels() const { return out_h * out_w; }                    // L of the GEMM
};

// floor((in + 2*padding - kernel) / stride) + 1; <= 0 when the kernel does not fit.
inline int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t span = in + 2 * padding - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

// col (C*kH*kW, Ho*Wo) = the receptive fields of one image x (C, H, W), zeros where they cover padding.
template <class T>
void im2col(const T* x, const ConvGeometry& g, T* col);
// dx (C, H, W) += the columns of col (C*kH*kW, Ho*Wo) scattered back to the pixels they were read from.
template <class T>
void col2im_add(const T* col, const ConvGeometry& g, T* dx);

// y (N, Cout, Ho, Wo) = conv(x (N, Cin, H, W), w (Cout, Cin, kH, kW)) + b (Cout; may be null).
template <class T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const ConvGeometry& g);

// Gradients of conv2d_forward given dy (N, Cout, Ho, Wo). Each output may be null (not needed); the ones
// given are overwritten: dx (N, Cin, H, W), dw (Cout, Cin, kH, kW), db (Cout).
template <class T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const ConvGeometry& g);

}  // namespace ddp::kernels::cpu
