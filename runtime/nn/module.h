// module.h - Module: a named tree of parameters, buffers and submodules. Names are hierarchical
// ("blocks.0.attn.qkv.weight") and keep registration order, which the DDP reducer buckets in reverse.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ddp::nn {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Single-input modules (layers, Sequential) override this; others define their own forward.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // All parameters / buffers of this module and its children, depth first in registration order.
  std::vector<NamedTensor> named_parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  std::vector<Tensor> parameters() const;
  std::vector<Tensor> buffers() const;
  int64_t num_parameters() const;  // total elements

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves (or converts) every parameter and buffer in place: tensor handles held elsewhere stay valid.
  void to(Device device);
  void to(DType dtype);
  // Sets every parameter's grad to none (optimizers then skip parameters that get no gradient).
  void zero_grad();

  // The direct submodules, in registration order; replace_child swaps one for another module (model surgery,
  // e.g. convert_sync_batchnorm). Containers that keep their own typed list (Sequential, ModuleList) override
  // it to update that list too.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  virtual void replace_child(const std::string& name, std::shared_ptr<Module> m);

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, bool params, std::vector<NamedTensor>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Seeds the thread's parameter-initialisation generator (same seed -> same initial weights on every rank).
void manual_seed(uint64_t seed);
// A fresh seed for the next initialisation, drawn from the thread's generator.
uint64_t next_init_seed();

}  // namespace ddp::nn
