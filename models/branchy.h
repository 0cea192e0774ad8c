// branchy.h - the reference model for parameters that receive no gradient: a shared trunk, two
// experts of which the data picks one per step (the sign of the batch mean of the first input
// feature), and a head that is never used. On a step where ranks pick different experts, each expert
// gets a gradient on some ranks only.
#pragma once
#include "runtime/nn/layers.h"

namespace ddp::models {

struct BranchyConfig {
  int64_t in = 16;
  int64_t hidden = 32;
  int64_t out = 4;
  DType dtype = DType::F32;
};

class Branchy : public nn::Module {
 public:
  explicit Branchy(const BranchyConfig& c);
  Tensor forward(const Tensor& x) override;  // x (N, in) -> (N, out)
  // Which expert forward(x) uses: 0 when mean(x[:, 0]) >= 0, else 1.
  static int expert_for(const Tensor& x);
  std::shared_ptr<nn::Linear> trunk, expert0, expert1, never_used, head;
};

}  // namespace ddp::models
