// cnn.cpp - conv(3x3, pad 1) -> BN -> ReLU -> maxpool(2), twice, then flatten and a linear head.
#include "models/cnn.h"

#include "runtime/ops/shape.h"

namespace ddp::models {

CNN::CNN(const CNNConfig& c) : config(c) {
  DDP_CHECK(c.image % 4 == 0, "CNN: image size ", c.image, " must be a multiple of 4 (two 2x2 poolings)");
  features_ = register_module("features", std::make_shared<nn::Sequential>());
  features_->push_back(std::make_shared<nn::Conv2d>(c.in_channels, c.channels1, 3, 1, 1, true, c.dtype));
  features_->push_back(std::make_shared<nn::BatchNorm2d>(c.channels1, 0.1, 1e-5, c.dtype));
  features_->push_back(std::make_shared<nn::ReLU>());
  features_->push_back(std::make_shared<nn::MaxPool2d>(2));
  features_->push_back(std::make_shared<nn::Conv2d>(c.channels1, c.channels2, 3, 1, 1, true, c.dtype));
  features_->push_back(std::make_shared<nn::BatchNorm2d>(c.channels2, 0.1, 1e-5, c.dtype));
  features_->push_back(std::make_shared<nn::ReLU>());
  features_->push_back(std::make_shared<nn::MaxPool2d>(2));
  const int64_t side = c.image / 4;
  head_ = register_module("head",
                          std::make_shared<nn::Linear>(c.channels2 * side * side, c.classes, true, c.dtype));
}

Tensor CNN::forward(const Tensor& x) {
  Tensor img =
      x.dim() == 4 ? x : ops::reshape(x, {x.size(0), config.in_channels, config.image, config.image});
  return (*head_)(ops::flatten((*features_)(img), 1));
}

}  // namespace ddp::models
