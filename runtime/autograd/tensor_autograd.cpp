// tensor_autograd.cpp - the members of Tensor that need autograd's Node (declared in tensor.h): they live
// here so that runtime/tensor never includes the layer above it.
#include "runtime/autograd/node.h"
#include "runtime/core/error.h"
#include "runtime/tensor/tensor.h"

namespace ddp {

Tensor& Tensor::set_requires_grad(bool r) {
  DDP_CHECK(is_leaf(), "set_requires_grad on a non-leaf tensor (it was produced by ", grad_fn()->name(),
            "); call detach() first");
  DDP_CHECK(!r || dtype_is_floating(dtype()), "requires_grad needs a floating dtype, not ",
            dtype_name(dtype()));
  impl_->requires_grad = r;
  return *this;
}

}  // namespace ddp
