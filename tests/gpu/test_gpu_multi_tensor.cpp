// test_gpu_multi_tensor.cpp - the multi-tensor CUDA kernels (kernels/cuda/multi_tensor.cu) over lists with
// sizes 0, 1, primes, chunk +- 1 and a large one, and more tensors than one launch's table holds:
//  - the sum of squares equals the CPU twin (kernels/cpu/multi_tensor.h: the same fixed-order reduction) bit
//    for bit, the plain float64 CPU sum to 1e-12 relative (float64 accumulation over ~10^6 terms in two
//    different orders: the two differ by a few ulps of the total), and is the same on every run;
//  - multi-tensor AdamW and SGD equal the single-tensor kernels (kernels/cuda/optim.cu) bit for bit, with
//    per-parameter bias corrections, momentum buffers on their first and later steps, and parameters without.
// Skips with "skipped: no GPU".
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/multi_tensor.h"
#include "runtime/core/device.h"
#include "runtime/tensor/multi_tensor_math.h"
#include "runtime/tensor/tensor_math.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/multi_tensor.h"
#include "kernels/cuda/optim.h"
#include "runtime/core/cuda/stream.h"
#endif

using namespace ddp;

namespace {
using kernels::cpu::kMultiTensorChunk;

std::vector<int64_t> list_sizes() {
  std::vector<int64_t> s = {0,
                            1,
                            2,
                            3,
                            5,
                            7,
                            11,
                            13,
                            0,
                            257,
                            1009,
                            kMultiTensorChunk - 1,
                            kMultiTensorChunk,
                            kMultiTensorChunk + 1,
                            65537,
                            (1 << 20) + 3};
  for (int i = 0; i < 400; ++i) s.push_back(1 + (i * 37) % 97);  // more tensors than one table holds
  return s;
}
Tensor values(int64_t n, DType dtype, int salt, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = scale * std::sin(0.37 * static_cast<double>(i + 1) * salt + salt) *
                                std::pow(10.0, static_cast<double>(i % 5) - 2);
  return Tensor::from_vector(v, {n}, DType::F64).to(dtype);
}
std::vector<Tensor> make_list(DType dtype, int salt, Device device) {
  std::vector<Tensor> out;
  int k = 0;
  for (int64_t n : list_sizes()) out.push_back(values(n, dtype, salt + k++).to(device));
  return out;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return ha.dtype() == hb.dtype() && ha.numel() == hb.numel() &&
         std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}
bool bits_equal(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
}  // namespace

#ifdef DDP_WITH_CUDA
TEST(GpuMultiTensor, SumOfSquaresEqualsTheCpuTwinBitwiseAndTheFloat64SumToRounding) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  for (DType dtype : {DType::F32, DType::F64}) {
    const std::vector<Tensor> host = make_list(dtype, 3, Device::cpu());
    std::vector<Tensor> dev;
    for (const Tensor& t : host) dev.push_back(t.to(Device::cuda(0)));
    const double gpu = sum_of_squares_tensor(dev, Device::cuda(0)).item();
    double twin;
    if (dtype == DType::F32) {
      std::vector<const float*> p;
      for (const Tensor& t : host) p.push_back(t.data<float>());
      twin = kernels::cpu::chunked_sum_of_squares<float>(p, list_sizes(),
                                                         kernels::cuda::multi_tensor_max_tensors(),
                                                         kernels::cuda::multi_tensor_max_blocks());
    } else {
      std::vector<const double*> p;
      for (const Tensor& t : host) p.push_back(t.data<double>());
      twin = kernels::cpu::chunked_sum_of_squares<double>(p, list_sizes(),
                                                          kernels::cuda::multi_tensor_max_tensors(),
                                                          kernels::cuda::multi_tensor_max_blocks());
    }
    double plain = 0;
    for (const Tensor& t : host) plain += sum_of_squares(t);
    EXPECT_TRUE(bits_equal(gpu, twin)) << dtype_name(dtype) << ": GPU " << gpu << " vs CPU twin " << twin;
    EXPECT_NEAR(gpu, plain, 1e-12 * plain) << dtype_name(dtype);
    for (int run = 0; run < 5; ++run) {
      const double again = sum_of_squares_tensor(dev, Device::cuda(0)).item();
      EXPECT_TRUE(bits_equal(again, gpu))
          << dtype_name(dtype) << ", run " << run << ": " << again << " vs " << gpu;
    }
  }
  // Mixed float32 and float64 in one list; and an empty list.
  std::vector<Tensor> mixed = make_list(DType::F32, 5, Device::cuda(0));
  for (Tensor& t : make_list(DType::F64, 7, Device::cuda(0))) mixed.push_back(t);
  double plain = 0;
  for (const Tensor& t : mixed) plain += sum_of_squares(t);
  EXPECT_NEAR(sum_of_squares_tensor(mixed, Device::cuda(0)).item(), plain, 1e-12 * plain);
  EXPECT_EQ(sum_of_squares_tensor({}, Device::cuda(0)).item(), 0.0);
}

TEST(GpuMultiTensor, AdamWEqualsTheSingleTensorKernelBitwise) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  const std::vector<int64_t> sizes = list_sizes();
  for (DType dtype : {DType::F32, DType::F64}) {
    std::vector<Tensor> w[2], g, m[2], v[2];
    std::vector<double> bc1, bc2;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int salt = static_cast<int>(i);
      for (int k = 0; k < 2; ++k) {
        w[k].push_back(values(sizes[i], dtype, salt + 1).to(Device::cuda(0)));
        m[k].push_back(values(sizes[i], dtype, salt + 2, 0.1).to(Device::cuda(0)));
        Tensor sq = values(sizes[i], dtype, salt + 3, 0.1);
        sq = Tensor::from_vector(sq.to_double_vector(), {sizes[i]}, DType::F64);
        for (int64_t j = 0; j < sizes[i]; ++j) sq.data<double>()[j] *= sq.data<double>()[j];  // v >= 0
        v[k].push_back(sq.to(dtype).to(Device::cuda(0)));
      }
      g.push_back(values(sizes[i], dtype, salt + 4, 0.5).to(Device::cuda(0)));
      const double t = 1 + static_cast<double>(i % 9);  // per-parameter step counts
      bc1.push_back(1 - std::pow(0.9, t));
      bc2.push_back(1 - std::pow(0.999, t));
    }
    cudaStream_t s = cuda::current_stream();
    std::vector<void*> pw, pm, pv;
    std::vector<const void*> pg;
    for (size_t i = 0; i < sizes.size(); ++i) {
      kernels::cuda::adamw_step(w[0][i].raw_data(), g[i].raw_data(), m[0][i].raw_data(), v[0][i].raw_data(),
                                dtype, sizes[i], 1e-3, 0.9, 0.999, 1e-8, 0.01, bc1[i], bc2[i], s);
      pw.push_back(w[1][i].raw_data());
      pm.push_back(m[1][i].raw_data());
      pv.push_back(v[1][i].raw_data());
      pg.push_back(g[i].raw_data());
    }
    kernels::cuda::multi_tensor_adamw_step(pw, pg, pm, pv, sizes, dtype, 1e-3, 0.9, 0.999, 1e-8, 0.01, bc1,
                                           bc2, s);
    device_synchronize();
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(same_bits(w[0][i], w[1][i])) << dtype_name(dtype) << " weights of tensor " << i;
      EXPECT_TRUE(same_bits(m[0][i], m[1][i])) << dtype_name(dtype) << " exp_avg of tensor " << i;
      EXPECT_TRUE(same_bits(v[0][i], v[1][i])) << dtype_name(dtype) << " exp_avg_sq of tensor " << i;
    }
  }
}

TEST(GpuMultiTensor, SgdEqualsTheSingleTensorKernelBitwise) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  const std::vector<int64_t> sizes = list_sizes();
  struct Options {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (DType dtype : {DType::F32, DType::F64})
    for (const Options& o :
         {Options{0.9, 0.1, 0.01, false}, Options{0.8, 0, 0.05, true}, Options{0, 0, 0.1, false}}) {
      std::vector<Tensor> w[2], buf[2], g;
      std::vector<uint8_t> first;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const int salt = static_cast<int>(i);
        const bool has_buf = o.momentum != 0 && i % 5 != 4;  // some parameters have no buffer
        for (int k = 0; k < 2; ++k) {
          w[k].push_back(values(sizes[i], dtype, salt + 1).to(Device::cuda(0)));
          buf[k].push_back(has_buf ? values(sizes[i], dtype, salt + 2, 0.1).to(Device::cuda(0)) : Tensor());
        }
        g.push_back(values(sizes[i], dtype, salt + 4, 0.5).to(Device::cuda(0)));
        first.push_back(i % 3 == 0);  // a buffer's first step (buf = d) beside later ones
      }
      cudaStream_t s = cuda::current_stream();
      std::vector<void*> pw, pb;
      std::vector<const void*> pg;
      for (size_t i = 0; i < sizes.size(); ++i) {
        void* b0 = buf[0][i].defined() ? buf[0][i].raw_data() : nullptr;
        kernels::cuda::sgd_step(w[0][i].raw_data(), g[i].raw_data(), b0, dtype, sizes[i], 0.05, o.momentum,
                                o.dampening, o.weight_decay, o.nesterov, first[i] != 0, s);
        pw.push_back(w[1][i].raw_data());
        pb.push_back(buf[1][i].defined() ? buf[1][i].raw_data() : nullptr);
        pg.push_back(g[i].raw_data());
      }
      kernels::cuda::multi_tensor_sgd_step(pw, pg, pb, first, sizes, dtype, 0.05, o.momentum, o.dampening,
                                           o.weight_decay, o.nesterov, s);
      device_synchronize();
      for (size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_TRUE(same_bits(w[0][i], w[1][i])) << dtype_name(dtype) << " weights of tensor " << i;
        if (buf[0][i].defined())
          EXPECT_TRUE(same_bits(buf[0][i], buf[1][i])) << dtype_name(dtype) << " momentum of tensor " << i;
      }
    }
}

TEST(GpuMultiTensor, ScaleReadsItsCoefficientFromTheDeviceAndOneWritesNothing) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  const std::vector<int64_t> sizes = list_sizes();
  for (double c : {0.37, 1.0}) {
    std::vector<Tensor> host = make_list(DType::F32, 11, Device::cpu()), dev;
    std::vector<void*> p;
    for (const Tensor& t : host) {
      dev.push_back(t.to(Device::cuda(0)));
      p.push_back(dev.back().raw_data());
    }
    const Tensor coefficient = Tensor::from_data<double>({c}, {1}).to(Device::cuda(0));
    kernels::cuda::multi_tensor_scale(p, sizes, DType::F32, coefficient.data<double>(),
                                      cuda::current_stream());
    for (size_t i = 0; i < host.size(); ++i) {
      Tensor want = host[i].clone();
      scale_(want, c);  // the CPU's x *= float(c)
      EXPECT_TRUE(same_bits(dev[i], want)) << "coefficient " << c << ", tensor " << i;
    }
  }
}
#else
TEST(GpuMultiTensor, NeedsACudaBuild) { GTEST_SKIP() << "skipped: no GPU (built without CUDA)"; }
#endif  // DDP_WITH_CUDA
