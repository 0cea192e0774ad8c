// layers.h - the building blocks of the reference models: Linear, Conv2d, BatchNorm2d, LayerNorm, Embedding,
// Dropout, activations, Sequential and ModuleList. Initialisation follows PyTorch's defaults, drawn from the
// thread's init generator (nn::manual_seed), so every rank that seeds alike builds identical weights.
#pragma once
#include <memory>
#include <vector>

#include "runtime/nn/module.h"
#include "runtime/ops/dropout.h"

namespace ddp::nn {

// y = x W^T + b; x (..., in) -> (..., out). W, b ~ U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true, DType dtype = DType::F32);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  // Under bf16 compute, return the product as a bfloat16 tensor (ops::linear_bf16_output): a classifier
  // whose logits go straight to ops::cross_entropy.
  bool bf16_output = false;
};

// NCHW convolution with square kernel, one stride and padding for both dimensions.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = true, DType dtype = DType::F32);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t stride, padding;
};

// Batch statistics in training (running stats updated), running stats in eval. Buffers: running_mean/var.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double momentum = 0.1, double eps = 1e-5, DType dtype = DType::F32);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias, running_mean, running_var;
  double momentum, eps;

 protected:
  // Registers the given tensors themselves (shared, not copied): for layers that take over another's state.
  struct SharedState {
    Tensor weight, bias, running_mean, running_var;
  };
  BatchNorm2d(const SharedState& state, double momentum, double eps);
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, DType dtype = DType::F32);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  double eps;
  // Under bf16 compute, return y as a bfloat16 tensor (ops::layer_norm_bf16_output): a layer norm whose only
  // consumers are bf16 GEMMs.
  bool bf16_output = false;
};

// weight (num, dim) ~ N(0, std) (std 1 as PyTorch, GPT-2 uses 0.02); forward takes int64 indices.
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, double init_std = 1.0, DType dtype = DType::F32);
  Tensor forward(const Tensor& indices) override;
  Tensor weight;
};

// Identity in eval or with p = 0; masks come from a counter-based generator seeded from the init generator.
// The generator's (seed, offset) is the int64 buffer "rng", so checkpoints restore it (exact resume) and DDP
// broadcasts it from rank 0 like any buffer.
class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) override;
  double p;
  Tensor rng;  // int64 (2): seed, offset
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};
class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};
// (N, ...) -> (N, prod(...))
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0) : kernel(kernel), stride(stride) {}
  Tensor forward(const Tensor& x) override;
  int64_t kernel, stride;
};

// Runs its children in order; children are named "0", "1", ...
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);
  void push_back(std::shared_ptr<Module> layer);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  void replace_child(const std::string& name, std::shared_ptr<Module> m) override;

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

// A list of submodules named "0", "1", ... (no forward of its own).
template <class M>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> m) {
    register_module(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  M& operator[](size_t i) { return *items_[i]; }
  size_t size() const { return items_.size(); }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  void replace_child(const std::string& name, std::shared_ptr<Module> m) override {
    auto typed = std::dynamic_pointer_cast<M>(m);
    DDP_CHECK(typed != nullptr, "ModuleList::replace_child(", name, "): the new module is not of the list's type");
    Module::replace_child(name, m);
    items_.at(std::stoul(name)) = std::move(typed);
  }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace ddp::nn
