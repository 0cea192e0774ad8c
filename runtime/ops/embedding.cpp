// embedding.cpp - forward (gather) and backward (scatter-add) of embedding, dispatching to
// kernels/{cpu,cuda}/embedding. On the CPU indices are validated before any memory is read through them; on
// a GPU a kernel validates them and reports the first bad position into a slot of runtime/tensor/
// device_checks.h, raised at the next host read, while the gather and scatter skip bad indices.
#include "runtime/ops/embedding.h"

#include "kernels/cpu/embedding.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/device_kernel.h"
#include "runtime/ops/index_errors.h"
#include "runtime/tensor/device_checks.h"
#ifdef DDP_WITH_CUDA
#include "kernels/cuda/embedding.h"
#include "runtime/core/cuda/stream.h"
#endif

namespace ddp::ops {
namespace {
struct EmbeddingBackward final : autograd::Node {
  Tensor indices;
  Shape weight_shape;
  DType dtype = DType::F32;
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    const Tensor& g = grads[0];
    // Straight into the table's DDP bucket slot where the reducer offers it (autograd/node.h); the kernel
    // zeroes it before it scatters.
    Tensor dweight = autograd::gradient_destination_or_empty(next_edges[0], weight_shape, dtype, g.device());
    const int64_t vocab = weight_shape[0], cols = weight_shape[1], n = indices.numel();
    DDP_DISPATCH_FLOATING(dtype, "embedding backward", [&] {
      DDP_KERNEL_ON_STREAM(g.device(), embedding_backward, g.data<scalar_t>(), indices.data<int64_t>(),
                           dweight.data<scalar_t>(), n, vocab, cols);
    });
    return {dweight};
  }
  const char* name() const override { return "embedding"; }
  void release_saved() override { indices = Tensor(); }
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  DDP_CHECK(weight.defined() && indices.defined(), "embedding: weight or indices is undefined");
  DDP_CHECK(weight.dim() == 2, "embedding: weight must be (V, C); got shape ", shape_str(weight.shape()));
  DDP_CHECK(indices.dtype() == DType::I64, "embedding: indices must be int64; got ",
            dtype_name(indices.dtype()), " (convert with .to(DType::I64))");
  DDP_CHECK(weight.device() == indices.device(), "embedding: weight on ", weight.device().str(),
            " but indices on ", indices.device().str(), "; move both to one device");
  const int64_t vocab = weight.size(0), cols = weight.size(1), n = indices.numel();
  Shape out_shape = indices.shape();
  out_shape.push_back(cols);
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  if (n > 0) {
#ifdef DDP_WITH_CUDA
    if (weight.device().is_cuda()) {  // no host wait: a bad index is raised by ddp::check_device_errors()
      unsigned long long* first_bad = reserve_device_check(
          {indices, [shape = indices.shape(), vocab, table = weight.name()](int64_t value, int64_t pos) {
             return embedding_index_error(shape, vocab, table, value, pos);
           }});
      kernels::cuda::first_bad_index(indices.data<int64_t>(), n, vocab, first_bad, cuda::current_stream());
      DDP_DISPATCH_FLOATING(weight.dtype(), "embedding", [&] {
        kernels::cuda::embedding_forward(weight.data<scalar_t>(), indices.data<int64_t>(), vocab,
                                         out.data<scalar_t>(), n, cols, cuda::current_stream());
      });
    } else
#endif
    {
      DDP_CHECK(weight.device().is_cpu(), "embedding on ", weight.device().str(),
                " is not available in this build");
      const int64_t bad = kernels::cpu::first_bad_index(indices.data<int64_t>(), n, vocab);
      if (bad >= 0)
        DDP_FAIL(
            embedding_index_error(indices.shape(), vocab, weight.name(), indices.data<int64_t>()[bad], bad));
      DDP_DISPATCH_FLOATING(weight.dtype(), "embedding", [&] {
        kernels::cpu::embedding_forward(weight.data<scalar_t>(), indices.data<int64_t>(),
                                        out.data<scalar_t>(), n, cols);
      });
    }
  }
  if (autograd::needs_grad({&weight})) {
    auto node = std::make_shared<EmbeddingBackward>();
    node->indices = indices;
    node->weight_shape = weight.shape();
    node->dtype = weight.dtype();
    autograd::record(node, {&weight}, {&out});
  }
  return out;
}

}  // namespace ddp::ops
