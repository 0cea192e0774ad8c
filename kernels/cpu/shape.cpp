// shape.cpp - permutation by coalesced odometer walks (with 32x32 tiles when the innermost output dimension
// is strided in the input, i.e. a true transpose) and row-by-row memcpy for block copies.
#include "kernels/cpu/shape.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/error.h"

namespace ddp::kernels::cpu {
PermutePlan plan_permute(const Dims& shape, const Dims& perm) {
  const size_t nd = shape.size();
  Dims stride(nd, 1);
  for (size_t d = nd; d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  PermutePlan p;
  for (size_t i = 0; i < nd; ++i) {
    const int64_t s = shape[perm[i]], st = stride[perm[i]];
    if (s == 1) continue;
    if (!p.size.empty() && p.in_stride.back() == st * s) {
      p.size.back() *= s;
      p.in_stride.back() = st;
    } else {
      p.size.push_back(s);
      p.in_stride.push_back(st);
    }
  }
  return p;
}

namespace {
template <class E>
void permute_typed(const E* x, const PermutePlan& p, E* out) {
  const int n = static_cast<int>(p.size.size());
  if (n == 0) {  // a single element
    out[0] = x[0];
    return;
  }
  Dims out_stride(n, 1);
  for (int d = n - 1; d > 0; --d) out_stride[d - 1] = out_stride[d] * p.size[d];
  const int q = n - 1;
  if (p.in_stride[q] == 1) {  // innermost output run is contiguous in the input: copy rows
    const int64_t width = p.size[q];
    int64_t rows = 1;
    for (int d = 0; d < q; ++d) rows *= p.size[d];
    Dims idx(n, 0);
    int64_t in_off = 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(out + r * width, x + in_off, static_cast<size_t>(width) * sizeof(E));
      for (int d = q - 1; d >= 0; --d) {
        in_off += p.in_stride[d];
        if (++idx[d] < p.size[d]) break;
        in_off -= p.in_stride[d] * p.size[d];
        idx[d] = 0;
      }
    }
    return;
  }
  // A transpose: output dimension `pc` is the input's contiguous one; walk (pc, q) in tiles.
  int pc = 0;
  while (p.in_stride[pc] != 1) ++pc;
  std::vector<int> others;
  for (int d = 0; d < n; ++d)
    if (d != pc && d != q) others.push_back(d);
  int64_t blocks = 1;
  for (int d : others) blocks *= p.size[d];
  const int64_t np = p.size[pc], nq = p.size[q], sq = p.in_stride[q], so = out_stride[pc];
  constexpr int64_t kTile = 32;
  Dims idx(others.size(), 0);
  int64_t in_base = 0, out_base = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i0 = 0; i0 < np; i0 += kTile) {
      const int64_t i1 = std::min(np, i0 + kTile);
      for (int64_t j0 = 0; j0 < nq; j0 += kTile) {
        const int64_t j1 = std::min(nq, j0 + kTile);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j) out[out_base + i * so + j] = x[in_base + i + j * sq];
      }
    }
    for (int k = static_cast<int>(others.size()) - 1; k >= 0; --k) {
      const int d = others[k];
      in_base += p.in_stride[d];
      out_base += out_stride[d];
      if (++idx[k] < p.size[d]) break;
      in_base -= p.in_stride[d] * p.size[d];
      out_base -= out_stride[d] * p.size[d];
      idx[k] = 0;
    }
  }
}
}  // namespace

void permute(const void* x, const Dims& shape, const Dims& perm, void* out, size_t elem_size) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  if (numel == 0) return;
  const PermutePlan p = plan_permute(shape, perm);
  switch (elem_size) {
    case 1:
      permute_typed(static_cast<const uint8_t*>(x), p, static_cast<uint8_t*>(out));
      break;
    case 2:
      permute_typed(static_cast<const uint16_t*>(x), p, static_cast<uint16_t*>(out));
      break;
    case 4:
      permute_typed(static_cast<const uint32_t*>(x), p, static_cast<uint32_t*>(out));
      break;
    case 8:
      permute_typed(static_cast<const uint64_t*>(x), p, static_cast<uint64_t*>(out));
      break;
    default:
      DDP_FAIL("permute: element size ", elem_size, " bytes is not supported (1, 2, 4 or 8)");
  }
}

void copy_blocks(const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch, int64_t rows,
                 int64_t width_bytes) {
  if (width_bytes == 0) return;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  if (src_pitch == width_bytes && dst_pitch == width_bytes) {
    std::memcpy(d, s, static_cast<size_t>(rows * width_bytes));
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(d + r * dst_pitch, s + r * src_pitch, static_cast<size_t>(width_bytes));
}

}  // namespace ddp::kernels::cpu
