// shape.cpp - forward and backward of the shape ops. Views share storage; copies go through
// kernels/{cpu,cuda}/shape (permute; strided block copies for concat/split/slice).
//
// Concat, split and slice see x along `dim` as (outer, n, inner) blocks: a piece [b, e) of dimension dim is
// `outer` rows of (e - b) * inner contiguous elements, read with a pitch of n * inner.
#include "runtime/ops/shape.h"

#include <algorithm>
#include <numeric>

#include "kernels/cpu/shape.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"

#ifdef DDP_WITH_CUDA
#include "kernels/cuda/shape.h"
#endif

namespace ddp::ops {
namespace {
int64_t normalize_dim(const char* op, int64_t d, int64_t nd) {
  const int64_t r = d < 0 ? d + nd : d;
  DDP_CHECK(r >= 0 && r < nd, op, ": dimension ", d, " is out of range for a tensor with ", nd,
            " dimensions (valid: ", -nd, " to ", nd - 1, ")");
  return r;
}

void check_device(const char* op, const Tensor& x) {
  DDP_CHECK(x.defined(), op, ": input is undefined");
  check_device_built(op, x.device());
}

void copy_blocks_on(Device dev, const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch,
                    int64_t rows, int64_t width) {
  if (rows == 0 || width == 0) return;
  DDP_KERNEL(dev, copy_blocks, src, src_pitch, dst, dst_pitch, rows, width);
}

void permute_on(Device dev, const void* x, const Shape& shape, const std::vector<int64_t>& perm, void* out,
                size_t elem) {
  DDP_KERNEL(dev, permute, x, shape, perm, out, elem);
}

// x seen along dim as (outer, n, inner).
struct Blocks {
  int64_t outer = 1, n = 1, inner = 1;
};
Blocks blocks_of(const Shape& s, int64_t dim) {
  Blocks b;
  for (int64_t d = 0; d < dim; ++d) b.outer *= s[d];
  b.n = s[dim];
  for (size_t d = dim + 1; d < s.size(); ++d) b.inner *= s[d];
  return b;
}

// Copies piece [begin, begin + len) along the block dimension between a tensor laid out as (outer, n_full,
// inner) and a compact piece (outer, len, inner). to_piece: full -> piece, else piece -> full.
void copy_piece(const Tensor& full, const Tensor& piece, const Blocks& b, int64_t begin, int64_t len,
                bool to_piece) {
  const int64_t es = static_cast<int64_t>(dtype_size(full.dtype()));
  char* f = static_cast<char*>(full.raw_data()) + begin * b.inner * es;
  char* p = static_cast<char*>(piece.raw_data());
  const int64_t full_pitch = b.n * b.inner * es, piece_pitch = len * b.inner * es, width = len * b.inner * es;
  if (to_piece)
    copy_blocks_on(full.device(), f, full_pitch, p, piece_pitch, b.outer, width);
  else
    copy_blocks_on(full.device(), p, piece_pitch, f, full_pitch, b.outer, width);
}

// ---- views: reshape, flatten, unsqueeze, squeeze ----
struct ViewBackward final : autograd::Node {
  Shape in_shape;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {};
    return {grads[0].view(in_shape)};
  }
  const char* name() const override { return "reshape"; }
};

Tensor view_op(const Tensor& x, const Shape& shape) {
  Tensor y = x.view(shape);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<ViewBackward>();
    node->in_shape = x.shape();
    autograd::record(node, {&x}, {&y});
  }
  return y;
}

// ---- permute ----
struct PermuteBackward final : autograd::Node {
  std::vector<int64_t> inverse;  // output dimension i of the backward is gradient dimension inverse[i]
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    if (!g.defined()) return {};
    Shape s(inverse.size());
    for (size_t i = 0; i < inverse.size(); ++i) s[i] = g.shape()[inverse[i]];
    Tensor dx = Tensor::empty(s, g.dtype(), g.device());
    permute_on(g.device(), g.raw_data(), g.shape(), inverse, dx.raw_data(), dtype_size(g.dtype()));
    return {dx};
  }
  const char* name() const override { return "permute"; }
};

// ---- slice ----
struct SliceBackward final : autograd::Node {
  Shape in_shape;
  Blocks blocks;
  int64_t begin = 0;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    if (!g.defined()) return {};
    Tensor dx = Tensor::zeros(in_shape, g.dtype(), g.device());
    const int64_t len = blocks.inner > 0 && blocks.outer > 0 ? g.numel() / (blocks.outer * blocks.inner) : 0;
    copy_piece(dx, g, blocks, begin, len, false);
    return {dx};
  }
  const char* name() const override { return "slice"; }
};

// ---- split ----
struct SplitBackward final : autograd::Node {
  Shape in_shape;
  Blocks blocks;
  std::vector<int64_t> sizes;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    bool any = false, all = true;
    for (const Tensor& g : grads) {
      any = any || g.defined();
      all = all && g.defined();
    }
    if (!any) return {};
    const Tensor& first =
        *std::find_if(grads.begin(), grads.end(), [](const Tensor& t) { return t.defined(); });
    // Unused outputs contribute zeros.
    Tensor dx = all ? Tensor::empty(in_shape, first.dtype(), first.device())
                    : Tensor::zeros(in_shape, first.dtype(), first.device());
    int64_t begin = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (grads[i].defined()) copy_piece(dx, grads[i], blocks, begin, sizes[i], false);
      begin += sizes[i];
    }
    return {dx};
  }
  const char* name() const override { return "split"; }
};

// ---- concat ----
struct ConcatBackward final : autograd::Node {
  std::vector<Shape> shapes;
  int64_t dim = 0;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    if (!g.defined()) return {};
    const Blocks b = blocks_of(g.shape(), dim);
    std::vector<Tensor> out(shapes.size());
    int64_t begin = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const int64_t len = shapes[i][dim];
      if (next_edges[i].valid()) {
        out[i] = Tensor::empty(shapes[i], g.dtype(), g.device());
        copy_piece(g, out[i], b, begin, len, true);
      }
      begin += len;
    }
    return out;
  }
  const char* name() const override { return "concat"; }
};

// The piece [begin, begin + len) of x along dim, as a view when it is contiguous (outer == 1), else a copy.
Tensor take_piece(const Tensor& x, int64_t dim, const Blocks& b, int64_t begin, int64_t len) {
  Shape s = x.shape();
  s[dim] = len;
  if (b.outer == 1 && b.inner > 0) return x.view({b.n, b.inner}).slice0(begin, begin + len).view(s);
  Tensor out = Tensor::empty(s, x.dtype(), x.device());
  copy_piece(x, out, b, begin, len, true);
  return out;
}
}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  DDP_CHECK(x.defined(), "reshape: input is undefined");
  return view_op(x, shape);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  DDP_CHECK(x.defined(), "flatten: input is undefined");
  if (x.dim() == 0) return view_op(x, {1});
  const int64_t s = normalize_dim("flatten", start_dim, x.dim()),
                e = normalize_dim("flatten", end_dim, x.dim());
  DDP_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim, " for shape ",
            shape_str(x.shape()));
  Shape out(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= x.shape()[d];
  out.push_back(merged);
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return view_op(x, out);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  DDP_CHECK(x.defined(), "unsqueeze: input is undefined");
  const int64_t d = normalize_dim("unsqueeze", dim, x.dim() + 1);
  Shape s = x.shape();
  s.insert(s.begin() + d, 1);
  return view_op(x, s);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  DDP_CHECK(x.defined(), "squeeze: input is undefined");
  const int64_t d = normalize_dim("squeeze", dim, x.dim());
  DDP_CHECK(x.shape()[d] == 1, "squeeze: dimension ", dim, " of shape ", shape_str(x.shape()), " has size ",
            x.shape()[d], ", not 1");
  Shape s = x.shape();
  s.erase(s.begin() + d);
  return view_op(x, s);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  check_device("permute", x);
  const int64_t nd = x.dim();
  DDP_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute: ", dims.size(),
            " dimensions given for a tensor of shape ", shape_str(x.shape()),
            "; give a full ordering of its ", nd, " dimensions");
  std::vector<int64_t> perm(dims.size()), inverse(dims.size(), -1);
  for (int64_t i = 0; i < nd; ++i) {
    perm[i] = normalize_dim("permute", dims[i], nd);
    DDP_CHECK(inverse[perm[i]] < 0, "permute: dimension ", dims[i], " appears twice");
    inverse[perm[i]] = i;
  }
  Shape s(nd);
  for (int64_t i = 0; i < nd; ++i) s[i] = x.shape()[perm[i]];
  Tensor y = Tensor::empty(s, x.dtype(), x.device());
  permute_on(x.device(), x.raw_data(), x.shape(), perm, y.raw_data(), dtype_size(x.dtype()));
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<PermuteBackward>();
    node->inverse = std::move(inverse);
    autograd::record(node, {&x}, {&y});
  }
  return y;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_device("transpose", x);
  std::vector<int64_t> perm(x.dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[normalize_dim("transpose", dim0, x.dim())], perm[normalize_dim("transpose", dim1, x.dim())]);
  return permute(x, perm);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t begin, int64_t end) {
  check_device("slice", x);
  const int64_t d = normalize_dim("slice", dim, x.dim());
  const int64_t n = x.shape()[d];
  const int64_t b = begin < 0 ? begin + n : begin, e = end < 0 ? end + n : end;
  DDP_CHECK(0 <= b && b <= e && e <= n, "slice: range [", begin, ", ", end,
            ") is out of bounds for dimension ", dim, " of size ", n, " (shape ", shape_str(x.shape()), ")");
  const Blocks blocks = blocks_of(x.shape(), d);
  Tensor y = take_piece(x, d, blocks, b, e - b);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SliceBackward>();
    node->in_shape = x.shape();
    node->blocks = blocks;
    node->begin = b;
    autograd::record(node, {&x}, {&y});
  }
  return y;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  check_device("split", x);
  const int64_t d = normalize_dim("split", dim, x.dim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    DDP_CHECK(s >= 0, "split: negative piece size ", s);
    total += s;
  }
  DDP_CHECK(!sizes.empty() && total == x.shape()[d], "split: piece sizes add up to ", total,
            " but dimension ", dim, " of shape ", shape_str(x.shape()), " has size ", x.shape()[d]);
  const Blocks blocks = blocks_of(x.shape(), d);
  std::vector<Tensor> outs;
  outs.reserve(sizes.size());
  int64_t begin = 0;
  for (int64_t s : sizes) {
    outs.push_back(take_piece(x, d, blocks, begin, s));
    begin += s;
  }
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SplitBackward>();
    node->in_shape = x.shape();
    node->blocks = blocks;
    node->sizes = sizes;
    std::vector<Tensor*> out_ptrs;
    for (Tensor& t : outs) out_ptrs.push_back(&t);
    autograd::record(node, {&x}, out_ptrs);
  }
  return outs;
}

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  DDP_CHECK(!tensors.empty(), "concat: no tensors given");
  const Tensor& t0 = tensors[0];
  check_device("concat", t0);
  const int64_t d = normalize_dim("concat", dim, t0.dim());
  Shape out_shape = t0.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    DDP_CHECK(t.defined(), "concat: tensor ", i, " is undefined");
    DDP_CHECK(t.dtype() == t0.dtype() && t.device() == t0.device(), "concat: tensor ", i, " is ",
              dtype_name(t.dtype()), " on ", t.device().str(), " but tensor 0 is ", dtype_name(t0.dtype()),
              " on ", t0.device().str());
    bool same = t.dim() == t0.dim();
    for (int64_t k = 0; same && k < t.dim(); ++k) same = k == d || t.shape()[k] == t0.shape()[k];
    DDP_CHECK(same, "concat: tensor ", i, " has shape ", shape_str(t.shape()), " but tensor 0 has ",
              shape_str(t0.shape()), "; all dimensions except ", dim, " must match");
    out_shape[d] += t.shape()[d];
  }
  Tensor y = Tensor::empty(out_shape, t0.dtype(), t0.device());
  const Blocks b = blocks_of(out_shape, d);
  int64_t begin = 0;
  for (const Tensor& t : tensors) {
    copy_piece(y, t, b, begin, t.shape()[d], false);
    begin += t.shape()[d];
  }
  std::vector<const Tensor*> inputs;
  for (const Tensor& t : tensors) inputs.push_back(&t);
  bool need = false;
  for (const Tensor& t : tensors) need = need || autograd::needs_grad({&t});
  if (need) {
    auto node = std::make_shared<ConcatBackward>();
    for (const Tensor& t : tensors) node->shapes.push_back(t.shape());
    node->dim = d;
    autograd::record(node, inputs, std::vector<Tensor*>{&y});
  }
  return y;
}

}  // namespace ddp::ops
