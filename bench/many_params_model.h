// many_params_model.h - bench_e2e's "many" configuration: a model of N parameter tensors that hold the same
// total number of float32 values whatever N is (N vectors of total / N), applied one after another as
// h = h + p_i to a (batch, total / N) input whose result is the logits of a (total / N)-class cross-entropy.
// Its compute is about batch * total additions forward and backward for every N, so the DDP step minus the
// compute-only step of the same model, divided by N, is the reducer's cost per parameter (issue 29,
// "parameter count at fixed bytes"). bench/pytorch_twin.py --config many builds the same model in PyTorch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/nn/module.h"
#include "runtime/ops/elementwise.h"

namespace ddp::bench {

class ManyParams : public nn::Module {
 public:
  // n tensors of total / n elements each (total must be a multiple of n), zero-initialised.
  ManyParams(int64_t n, int64_t total) : width(total / n) {
    DDP_CHECK(n > 0 && total > 0 && total % n == 0, "ManyParams: ", total, " values do not split into ", n,
              " equal parameter tensors");
    params_.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      params_.push_back(register_parameter("p" + std::to_string(i), Tensor::zeros({width})));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const Tensor& p : params_) h = ops::add(h, p);
    return h;
  }
  const int64_t width;  // elements per parameter tensor = classes of the cross-entropy

 private:
  std::vector<Tensor> params_;
};

}  // namespace ddp::bench
