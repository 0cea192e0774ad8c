// branchy.cpp - data-dependent routing between two experts.
#include "models/branchy.h"

#include "runtime/ops/activation.h"

namespace ddp::models {

Branchy::Branchy(const BranchyConfig& c) {
  trunk = register_module("trunk", std::make_shared<nn::Linear>(c.in, c.hidden, true, c.dtype));
  expert0 = register_module("expert0", std::make_shared<nn::Linear>(c.hidden, c.hidden, true, c.dtype));
  expert1 = register_module("expert1", std::make_shared<nn::Linear>(c.hidden, c.hidden, true, c.dtype));
  never_used = register_module("never_used", std::make_shared<nn::Linear>(c.hidden, c.hidden, true, c.dtype));
  head = register_module("head", std::make_shared<nn::Linear>(c.hidden, c.out, true, c.dtype));
}

int Branchy::expert_for(const Tensor& x) {
  std::vector<double> v = x.to_double_vector();
  const int64_t n = x.size(0), d = x.size(1);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i * d];
  return s >= 0 ? 0 : 1;
}

Tensor Branchy::forward(const Tensor& x) {
  Tensor h = ops::relu((*trunk)(x));
  h = ops::relu((*(expert_for(x) == 0 ? expert0 : expert1))(h));
  return (*head)(h);
}

}  // namespace ddp::models
