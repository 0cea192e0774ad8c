// shared_linear.h - a linear layer over tensors it is given, so that two layers of a test model can share one
// weight (tied weights: a tensor registered twice is one parameter, listed under its first name).
#pragma once
#include <utility>

#include "runtime/nn/module.h"
#include "runtime/ops/linalg.h"

namespace ddp::testing {

class SharedLinear : public nn::Module {
 public:
  SharedLinear(Tensor w, Tensor b) {
    weight = register_parameter("weight", std::move(w));
    bias = register_parameter("bias", std::move(b));
  }
  Tensor forward(const Tensor& x) override { return ops::linear(x, weight, bias); }
  Tensor weight, bias;
};

}  // namespace ddp::testing
