// shape.cu - permutation by index mapping over the coalesced plan of kernels/cpu/shape.h (one thread per
// output element, reads gathered), and block copies as one cudaMemcpy2DAsync.
#include "kernels/cpu/shape.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/shape.h"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
constexpr int kMaxDims = 16;

struct PermuteArgs {
  int n = 0;
  int64_t size[kMaxDims];
  int64_t in_stride[kMaxDims];
};

template <class E>
__global__ void permute_kernel(const E* x, E* out, int64_t total, PermuteArgs p) {
  DDP_CUDA_KERNEL_LOOP(i, total) {
    int64_t rest = i, off = 0;
    for (int d = p.n - 1; d >= 0; --d) {
      off += (rest % p.size[d]) * p.in_stride[d];
      rest /= p.size[d];
    }
    out[i] = x[off];
  }
}

template <class E>
void launch_permute(const void* x, void* out, int64_t total, const PermuteArgs& p) {
  permute_kernel<E><<<grid_for(total), kBlock, 0, ddp::cuda::current_stream()>>>(
      static_cast<const E*>(x), static_cast<E*>(out), total, p);
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace

void permute(const void* x, const Dims& shape, const Dims& perm, void* out, size_t elem_size) {
  int64_t total = 1;
  for (int64_t s : shape) total *= s;
  if (total == 0) return;
  const cpu::PermutePlan plan = cpu::plan_permute(shape, perm);
  DDP_CHECK(plan.size.size() <= static_cast<size_t>(kMaxDims), "cuda permute: more than ", kMaxDims,
            " dimensions after merging");
  PermuteArgs p;
  p.n = static_cast<int>(plan.size.size());
  for (int d = 0; d < p.n; ++d) {
    p.size[d] = plan.size[d];
    p.in_stride[d] = plan.in_stride[d];
  }
  switch (elem_size) {
    case 1:
      return launch_permute<uint8_t>(x, out, total, p);
    case 2:
      return launch_permute<uint16_t>(x, out, total, p);
    case 4:
      return launch_permute<uint32_t>(x, out, total, p);
    case 8:
      return launch_permute<uint64_t>(x, out, total, p);
    default:
      DDP_FAIL("permute: element size ", elem_size, " bytes is not supported (1, 2, 4 or 8)");
  }
}

void copy_blocks(const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch, int64_t rows,
                 int64_t width_bytes) {
  if (rows == 0 || width_bytes == 0) return;
  DDP_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                                   static_cast<size_t>(width_bytes), static_cast<size_t>(rows),
                                   cudaMemcpyDeviceToDevice, ddp::cuda::current_stream()));
}

}  // namespace ddp::kernels::cuda
