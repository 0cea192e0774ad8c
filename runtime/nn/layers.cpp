// layers.cpp - parameter shapes, PyTorch-default initialisation, and each layer's forward (one op call).
#include "runtime/nn/layers.h"

#include <cmath>

#include "runtime/ops/activation.h"
#include "runtime/ops/batchnorm.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/layernorm.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/pool.h"
#include "runtime/ops/shape.h"

namespace ddp::nn {

namespace {
Tensor uniform_init(const Shape& shape, double bound, DType dtype) {
  return Tensor::uniform(shape, next_init_seed(), -bound, bound, dtype);
}
}  // namespace

Linear::Linear(int64_t in, int64_t out, bool with_bias, DType dtype) {
  DDP_CHECK(in > 0 && out > 0, "Linear(", in, ", ", out, "): sizes must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", uniform_init({out, in}, bound, dtype));
  if (with_bias) bias = register_parameter("bias", uniform_init({out}, bound, dtype));
}
Tensor Linear::forward(const Tensor& x) {
  return bf16_output ? ops::linear_bf16_output(x, weight, bias) : ops::linear(x, weight, bias);
}

Conv2d::Conv2d(int64_t cin, int64_t cout, int64_t k, int64_t stride_, int64_t padding_, bool with_bias,
               DType dtype)
    : stride(stride_), padding(padding_) {
  DDP_CHECK(cin > 0 && cout > 0 && k > 0 && stride > 0 && padding >= 0, "Conv2d(", cin, ", ", cout, ", k=", k,
            ", stride=", stride, ", padding=", padding, "): invalid sizes");
  const double bound = 1.0 / std::sqrt(static_cast<double>(cin * k * k));
  weight = register_parameter("weight", uniform_init({cout, cin, k, k}, bound, dtype));
  if (with_bias) bias = register_parameter("bias", uniform_init({cout}, bound, dtype));
}
Tensor Conv2d::forward(const Tensor& x) { return ops::conv2d(x, weight, bias, stride, padding); }

BatchNorm2d::BatchNorm2d(int64_t c, double momentum_, double eps_, DType dtype)
    : momentum(momentum_), eps(eps_) {
  weight = register_parameter("weight", Tensor::ones({c}, dtype));
  bias = register_parameter("bias", Tensor::zeros({c}, dtype));
  running_mean = register_buffer("running_mean", Tensor::zeros({c}, dtype));
  running_var = register_buffer("running_var", Tensor::ones({c}, dtype));
}
BatchNorm2d::BatchNorm2d(const SharedState& s, double momentum_, double eps_) : momentum(momentum_), eps(eps_) {
  weight = register_parameter("weight", s.weight);
  bias = register_parameter("bias", s.bias);
  running_mean = register_buffer("running_mean", s.running_mean);
  running_var = register_buffer("running_var", s.running_var);
}
Tensor BatchNorm2d::forward(const Tensor& x) {
  return ops::batch_norm2d(x, weight, bias, running_mean, running_var, is_training(), momentum, eps);
}

LayerNorm::LayerNorm(int64_t dim, double eps_, DType dtype) : eps(eps_) {
  weight = register_parameter("weight", Tensor::ones({dim}, dtype));
  bias = register_parameter("bias", Tensor::zeros({dim}, dtype));
}
Tensor LayerNorm::forward(const Tensor& x) {
  return bf16_output ? ops::layer_norm_bf16_output(x, weight, bias, eps)
                     : ops::layer_norm(x, weight, bias, eps);
}

Embedding::Embedding(int64_t num, int64_t dim, double init_std, DType dtype) {
  weight = register_parameter("weight", Tensor::randn({num, dim}, next_init_seed(), dtype, init_std));
}
Tensor Embedding::forward(const Tensor& indices) { return ops::embedding(weight, indices); }

Dropout::Dropout(double p_) : p(p_) {
  DDP_CHECK(p >= 0 && p < 1, "Dropout(p=", p, "): p must be in [0, 1)");
  rng = register_buffer("rng",
                        Tensor::from_data<int64_t>({static_cast<int64_t>(next_init_seed() >> 1), 0}, {2}));
}
Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0) return x;
  DDP_CHECK(rng.device().is_cpu(), "Dropout: the rng buffer must stay on the CPU");
  int64_t* state = rng.data<int64_t>();
  ops::DropoutGenerator gen{static_cast<uint64_t>(state[0]), static_cast<uint64_t>(state[1])};
  Tensor y = ops::dropout(x, p, true, gen);
  state[1] = static_cast<int64_t>(gen.offset);
  return y;
}

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }
Tensor GELU::forward(const Tensor& x) { return ops::gelu(x); }
Tensor Tanh::forward(const Tensor& x) { return ops::tanh(x); }
Tensor Flatten::forward(const Tensor& x) { return ops::flatten(x, 1); }
Tensor MaxPool2d::forward(const Tensor& x) { return ops::max_pool2d(x, kernel, stride); }

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) {
  for (auto& l : layers) push_back(std::move(l));
}
void Sequential::push_back(std::shared_ptr<Module> layer) {
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
}
void Sequential::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  Module::replace_child(name, m);
  layers_.at(std::stoul(name)) = std::move(m);
}
Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& l : layers_) h = (*l)(h);
  return h;
}

}  // namespace ddp::nn
