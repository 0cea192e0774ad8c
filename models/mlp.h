// mlp.h - the multilayer perceptron of the benchmarks: 784-1024-1024-10 with ReLU by default.
#pragma once
#include <vector>

#include "runtime/nn/layers.h"

namespace ddp::models {

struct MLPConfig {
  int64_t in = 784;
  std::vector<int64_t> hidden = {1024, 1024};
  int64_t out = 10;
  DType dtype = DType::F32;
};

// x (N, in) or (N, 1, 28, 28) -> logits (N, out). Parameters: layers.0.weight, layers.0.bias,
// layers.2.weight...
class MLP : public nn::Module {
 public:
  explicit MLP(const MLPConfig& c);
  Tensor forward(const Tensor& x) override;
  MLPConfig config;

 private:
  std::shared_ptr<nn::Sequential> layers_;
};

}  // namespace ddp::models
