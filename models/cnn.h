// cnn.h - a small convnet for 28x28 images: two conv-batchnorm-relu-maxpool stages and a linear head.
// BatchNorm2d makes it the reference case for buffer broadcasting in DDP.
#pragma once
#include "runtime/nn/layers.h"

namespace ddp::models {

struct CNNConfig {
  int64_t in_channels = 1;
  int64_t channels1 = 16;
  int64_t channels2 = 32;
  int64_t image = 28;
  int64_t classes = 10;
  DType dtype = DType::F32;
};

// x (N, C, 28, 28) or (N, 784) -> logits (N, classes).
class CNN : public nn::Module {
 public:
  explicit CNN(const CNNConfig& c);
  Tensor forward(const Tensor& x) override;
  CNNConfig config;

 private:
  std::shared_ptr<nn::Sequential> features_;
  std::shared_ptr<nn::Linear> head_;
};

}  // namespace ddp::models
