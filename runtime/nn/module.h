// module.h - Module: a named tree of parameters, buffers and submodules. Names are hierarchical
// ("blocks.0.attn.qkv.weight") and keep registration order, which the DDP reducer buckets in reverse.
#pragma once
#include <functional>
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
  // forward(x) with this module's forward hooks around it. Parents call their children this way (module(x)),
  // so that a hook set on a child runs: ZeRO-3 gathers a unit's parameters before its forward and reshards
  // them after it (runtime/ddp/sharded/). A child called as child->forward(x) runs without its hooks.
  Tensor operator()(const Tensor& x) {
    if (forward_hooks_.empty()) [[likely]]
      return forward(x);
    return forward_with_hooks(x);
  }

  // ---- forward hooks (like PyTorch's register_forward_pre_hook / register_forward_hook) ----
  // `pre` runs before forward (may be empty); `post` runs after it and returns the output the caller gets
  // (the same tensor, or one wrapped in an autograd node); `owner` keys the pair for removal.
  using ForwardPreHook = std::function<void(Module&)>;
  using ForwardPostHook = std::function<Tensor(Module&, const Tensor& output)>;
  void add_forward_hooks(const void* owner, ForwardPreHook pre, ForwardPostHook post);
  void remove_forward_hooks(const void* owner);
  // For a parent that fuses this module's computation into an op of its own instead of calling it
  // (models/gpt.cpp MLPBlock): it runs the pre-hooks itself (ZeRO-2 waits for its gathers there), which is
  // only right while no hook has a post part (that one needs the module's own output: ZeRO-3's units).
  bool has_forward_post_hooks() const;
  void run_forward_pre_hooks();

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
  Tensor forward_with_hooks(const Tensor& x);
  struct ForwardHooks {
    const void* owner;
    ForwardPreHook pre;
    ForwardPostHook post;
  };
  std::vector<ForwardHooks> forward_hooks_;
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
