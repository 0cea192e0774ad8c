// test_gpu_vector_access.cpp - the memory-bound CUDA kernels with 16-byte accesses (kernels/cuda/
// vector_access.cuh, plan: kernels/cpu/vector_plan.h) on misaligned views: every pointer of a kernel placed
// 0..3 elements past a 16-byte boundary, equally (a scalar head, then vectors) and differently (all scalar),
// at sizes from 1 to a large prime. For every placement the result equals the aligned run's (all vectors)
// bit for bit - the per-element math is the same on either path and no element is missed or done twice at a
// head or tail - and the CPU's: bitwise for the exact operations (add, mul, conversions, bf16 rounding, axpy
// with beta = 0); for the others within float32 rounding (affine and axpby may fuse a multiply-add on the
// GPU; GELU uses the fast __expf: 1e-6 + 1e-5 |cpu|; the optimizers, to 2e-6 relative as
// tests/gpu/test_gpu_optim). Skips with "skipped: no GPU".
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/tensor/tensor.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cpu/activation.h"
#include "kernels/cpu/optim.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/axpy.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/multi_tensor.h"
#include "kernels/cuda/optim.h"
#include "runtime/core/cuda/stream.h"
#endif

using namespace ddp;

#ifdef DDP_WITH_CUDA
namespace {
const std::vector<int64_t> kSizes = {1, 3, 8, 37, 4099, 100003};

struct Arg {
  DType dtype;
  int salt;                  // which values (see values_for)
  bool nonnegative = false;  // |values| (an AdamW second moment)
};

// Float32 values (bf16 values for a bf16 argument), of both signs and a few magnitudes.
std::vector<double> values_for(const Arg& a, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(2.5 * std::sin(0.37 * static_cast<double>(i + 1) * a.salt) +
                                       (a.salt % 3 == 0 ? 0.001 * static_cast<double>(i % 11) : 0.0));
    const float g = a.nonnegative ? std::fabs(f) : f;
    v[static_cast<size_t>(i)] = a.dtype == DType::BF16 ? BFloat16::from_float(g).to_float() : g;
  }
  return v;
}

using Kernel = std::function<void(const std::vector<void*>&, int64_t)>;

// Runs `kernel` on device copies of `args`, argument k `offsets[k]` elements into a fresh (256-byte aligned)
// buffer; returns every argument's values after it (outputs and in-place updates included).
std::vector<std::vector<double>> run(const std::vector<Arg>& args, const std::vector<int>& offsets, int64_t n,
                                     const Kernel& kernel) {
  std::vector<Tensor> views;
  std::vector<void*> pointers;
  for (size_t k = 0; k < args.size(); ++k) {
    std::vector<double> padded(static_cast<size_t>(n + 8), 0.0);
    const std::vector<double> v = values_for(args[k], n);
    std::copy(v.begin(), v.end(), padded.begin() + offsets[k]);
    Tensor buffer = Tensor::from_vector(padded, {n + 8}, args[k].dtype).to(Device::cuda(0));
    views.push_back(buffer.slice0(offsets[k], offsets[k] + n));
    pointers.push_back(views.back().raw_data());
  }
  kernel(pointers, n);
  std::vector<std::vector<double>> out;
  for (const Tensor& t : views) out.push_back(t.to_double_vector());
  return out;
}

// The placements: all aligned (first: the reference), all equally misaligned, and misaligned differently.
std::vector<std::vector<int>> placements(size_t pointers) {
  std::vector<std::vector<int>> out;
  for (int same = 0; same <= 3; ++same) out.push_back(std::vector<int>(pointers, same));
  if (pointers > 1)
    for (int shift = 1; shift <= 3; ++shift) {
      std::vector<int> o(pointers);
      for (size_t k = 0; k < pointers; ++k) o[k] = static_cast<int>((k * static_cast<size_t>(shift) + 1) % 4);
      out.push_back(o);
    }
  std::vector<int> first_off(pointers, 0);
  first_off[0] = 1;
  out.push_back(first_off);
  return out;
}

std::string where(int64_t n, const std::vector<int>& offsets) {
  std::string s = "n " + std::to_string(n) + ", offsets";
  for (int o : offsets) s += " " + std::to_string(o);
  return s;
}

// Expected values of argument `checked` after the kernel, from the inputs' values.
using Reference = std::function<std::vector<double>(const std::vector<std::vector<double>>& in)>;

void check(const std::vector<Arg>& args, const Kernel& kernel, size_t checked, const Reference& reference,
           double atol, double rtol) {
  for (int64_t n : kSizes) {
    std::vector<std::vector<double>> inputs;
    for (const Arg& a : args) inputs.push_back(values_for(a, n));
    const std::vector<double> expected = reference(inputs);
    std::vector<std::vector<double>> aligned;
    for (const auto& offsets : placements(args.size())) {
      SCOPED_TRACE(where(n, offsets));
      const auto got = run(args, offsets, n, kernel);
      if (aligned.empty()) {
        aligned = got;
        int bad = 0;
        for (size_t i = 0; i < expected.size() && bad < 5; ++i) {
          const double e = expected[i], g = got[checked][i];
          if (!(std::fabs(g - e) <= atol + rtol * std::fabs(e))) {
            ADD_FAILURE() << "element " << i << ": cuda " << g << ", cpu " << e;
            ++bad;
          }
        }
      } else {
        for (size_t k = 0; k < got.size(); ++k)
          EXPECT_EQ(got[k], aligned[k]) << "argument " << k << " differs from the aligned run's";
      }
    }
  }
}

cudaStream_t stream() { return ddp::cuda::current_stream(); }
float* f32(void* p) { return static_cast<float*>(p); }

// Applies a CPU float kernel to float copies of the inputs: out = k(in...).
std::vector<double> on_cpu(const std::vector<std::vector<double>>& in,
                           const std::function<void(const std::vector<float*>&, int64_t)>& k, size_t out) {
  std::vector<std::vector<float>> f;
  for (const auto& v : in) f.emplace_back(v.begin(), v.end());
  std::vector<float*> p;
  for (auto& v : f) p.push_back(v.data());
  k(p, static_cast<int64_t>(in[0].size()));
  return {f[out].begin(), f[out].end()};
}
}  // namespace

#define DDP_SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no GPU"

TEST(GpuVectorAccess, AddAndMulOnMisalignedViews) {
  DDP_SKIP_WITHOUT_GPU();
  const std::vector<Arg> args{{DType::F32, 1}, {DType::F32, 2}, {DType::F32, 3}};  // out, a, b
  for (auto op : {kernels::cuda::BinaryOp::Add, kernels::cuda::BinaryOp::Mul}) {
    const bool add = op == kernels::cuda::BinaryOp::Add;
    check(
        args,
        [op](const std::vector<void*>& p, int64_t n) {
          kernels::cuda::binary_broadcast<float>(op, f32(p[1]), {n}, f32(p[2]), {n}, f32(p[0]), {n});
        },
        0,
        [add](const auto& in) {
          std::vector<double> e(in[1].size());
          for (size_t i = 0; i < e.size(); ++i) {
            const float a = static_cast<float>(in[1][i]), b = static_cast<float>(in[2][i]);
            e[i] = add ? a + b : a * b;
          }
          return e;
        },
        0, 0);
  }
}

TEST(GpuVectorAccess, AffineOnMisalignedViews) {
  DDP_SKIP_WITHOUT_GPU();
  check(
      {{DType::F32, 1}, {DType::F32, 2}},
      [](const std::vector<void*>& p, int64_t n) {
        kernels::cuda::affine<float>(f32(p[1]), f32(p[0]), n, 0.75, -0.25);
      },
      0,
      [](const auto& in) {
        std::vector<double> e(in[1].size());
        for (size_t i = 0; i < e.size(); ++i) e[i] = 0.75f * static_cast<float>(in[1][i]) + -0.25f;
        return e;
      },
      1e-6, 1e-6);
}

TEST(GpuVectorAccess, GeluForwardAndBackwardOnMisalignedViews) {
  DDP_SKIP_WITHOUT_GPU();
  check(
      {{DType::F32, 1}, {DType::F32, 2}},
      [](const std::vector<void*>& p, int64_t n) {
        kernels::cuda::gelu_forward<float>(f32(p[1]), f32(p[0]), n);
      },
      0,
      [](const auto& in) {
        return on_cpu(
            in, [](const auto& p, int64_t n) { kernels::cpu::gelu_forward<float>(p[1], p[0], n); }, 0);
      },
      1e-6, 1e-5);
  check(
      {{DType::F32, 1}, {DType::F32, 2}, {DType::F32, 3}},
      [](const std::vector<void*>& p, int64_t n) {
        kernels::cuda::gelu_backward<float>(f32(p[1]), f32(p[2]), f32(p[0]), n);
      },
      0,
      [](const auto& in) {
        return on_cpu(
            in, [](const auto& p, int64_t n) { kernels::cpu::gelu_backward<float>(p[1], p[2], p[0], n); }, 0);
      },
      1e-6, 1e-5);
}

TEST(GpuVectorAccess, AxpbyOnMisalignedViews) {
  DDP_SKIP_WITHOUT_GPU();
  for (double beta : {0.0, 0.5}) {
    check(
        {{DType::F32, 1}, {DType::F32, 2}},  // y (in place), x
        [beta](const std::vector<void*>& p, int64_t n) {
          kernels::cuda::axpby(p[0], p[1], DType::F32, beta, 2.0, n, stream());
        },
        0,
        [beta](const auto& in) {
          std::vector<double> e(in[0].size());
          for (size_t i = 0; i < e.size(); ++i) {
            float v = 2.0f * static_cast<float>(in[1][i]);
            if (beta != 0) v += static_cast<float>(beta) * static_cast<float>(in[0][i]);
            e[i] = v;
          }
          return e;
        },
        beta == 0 ? 0 : 1e-6, beta == 0 ? 0 : 1e-6);
  }
}

TEST(GpuVectorAccess, Bf16ConversionsAndRoundingOnMisalignedViews) {
  DDP_SKIP_WITHOUT_GPU();
  auto rounded = [](const auto& in, size_t k) {
    std::vector<double> e(in[k].size());
    for (size_t i = 0; i < e.size(); ++i)
      e[i] = BFloat16::from_float(static_cast<float>(in[k][i])).to_float();
    return e;
  };
  check(
      {{DType::BF16, 1}, {DType::F32, 2}},
      [](const std::vector<void*>& p, int64_t n) {
        kernels::cuda::to_bf16(f32(p[1]), static_cast<BFloat16*>(p[0]), n);
      },
      0, [&](const auto& in) { return rounded(in, 1); }, 0, 0);
  check(
      {{DType::F32, 1}, {DType::BF16, 2}},
      [](const std::vector<void*>& p, int64_t n) {
        kernels::cuda::from_bf16(static_cast<const BFloat16*>(p[1]), f32(p[0]), n);
      },
      0, [](const auto& in) { return in[1]; }, 0, 0);
  check(
      {{DType::F32, 1}},  // in place
      [](const std::vector<void*>& p, int64_t n) { kernels::cuda::round_to_bf16(f32(p[0]), n); }, 0,
      [&](const auto& in) { return rounded(in, 0); }, 0, 0);
}

TEST(GpuVectorAccess, DtypeConversionsOnMisalignedViews) {
  DDP_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<DType, DType>> pairs{{DType::F32, DType::F64},
                                                   {DType::F64, DType::F32},
                                                   {DType::F32, DType::BF16},
                                                   {DType::BF16, DType::F32}};
  for (auto [from, to] : pairs) {
    SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
    check(
        {{to, 1}, {from, 2}},
        [from, to](const std::vector<void*>& p, int64_t n) {
          kernels::cuda::convert(p[1], from, p[0], to, n, stream());
        },
        0,
        [to](const auto& in) {
          std::vector<double> e(in[1].size());
          for (size_t i = 0; i < e.size(); ++i) {
            const float f = static_cast<float>(in[1][i]);  // the inputs are float32 (or bf16) values
            e[i] = to == DType::BF16 ? BFloat16::from_float(f).to_float() : f;
          }
          return e;
        },
        0, 0);
  }
}

TEST(GpuVectorAccess, OptimizerStepsOnMisalignedViews) {
  DDP_SKIP_WITHOUT_GPU();
  check(
      {{DType::F32, 1}, {DType::F32, 2}, {DType::F32, 3}},  // w, g, momentum
      [](const std::vector<void*>& p, int64_t n) {
        kernels::cuda::sgd_step(p[0], p[1], p[2], DType::F32, n, 0.1, 0.9, 0.0, 0.01, true, false, stream());
      },
      0,
      [](const auto& in) {
        return on_cpu(
            in,
            [](const auto& p, int64_t n) {
              kernels::cpu::sgd_step<float>(p[0], p[1], p[2], n, 0.1, 0.9, 0.0, 0.01, true, false);
            },
            0);
      },
      1e-6, 2e-6);
  check(
      {{DType::F32, 1}, {DType::F32, 2}, {DType::F32, 3}, {DType::F32, 4, true}},  // w, g, m, v
      [](const std::vector<void*>& p, int64_t n) {
        kernels::cuda::adamw_step(p[0], p[1], p[2], p[3], DType::F32, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.1,
                                  0.001, stream());
      },
      0,
      [](const auto& in) {
        return on_cpu(
            in,
            [](const auto& p, int64_t n) {
              kernels::cpu::adamw_step<float>(p[0], p[1], p[2], p[3], n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.1,
                                              0.001);
            },
            0);
      },
      1e-6, 2e-6);
  // The multi-tensor AdamW (one tensor, several chunks: each block plans its own chunk) as the single one.
  check(
      {{DType::F32, 1}, {DType::F32, 2}, {DType::F32, 3}, {DType::F32, 4, true}},
      [](const std::vector<void*>& p, int64_t n) {
        kernels::cuda::multi_tensor_adamw_step({p[0]}, {p[1]}, {p[2]}, {p[3]}, {n}, DType::F32, 1e-3, 0.9,
                                               0.999, 1e-8, 0.01, {0.1}, {0.001}, stream());
      },
      0,
      [](const auto& in) {
        return on_cpu(
            in,
            [](const auto& p, int64_t n) {
              kernels::cpu::adamw_step<float>(p[0], p[1], p[2], p[3], n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.1,
                                              0.001);
            },
            0);
      },
      1e-6, 2e-6);
}
#endif  // DDP_WITH_CUDA
