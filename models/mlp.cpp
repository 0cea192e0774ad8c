// mlp.cpp - Linear/ReLU stack.
#include "models/mlp.h"

#include "runtime/ops/shape.h"

namespace ddp::models {

MLP::MLP(const MLPConfig& c) : config(c) {
  layers_ = register_module("layers", std::make_shared<nn::Sequential>());
  int64_t width = c.in;
  for (int64_t h : c.hidden) {
    layers_->push_back(std::make_shared<nn::Linear>(width, h, true, c.dtype));
    layers_->push_back(std::make_shared<nn::ReLU>());
    width = h;
  }
  layers_->push_back(std::make_shared<nn::Linear>(width, c.out, true, c.dtype));
}

Tensor MLP::forward(const Tensor& x) {
  Tensor flat = x.dim() == 2 ? x : ops::flatten(x, 1);
  return (*layers_)(flat);
}

}  // namespace ddp::models
