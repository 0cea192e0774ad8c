// rung3_hooks.cpp - rung 3 of the ladder (docs/ladder.md): a hook on every parameter launches an
// asynchronous all-reduce of its gradient the moment backward has finished it; after backward, wait for them.
// The idea over rung 2: backward produces the last layer's gradients first, so their communication can run
// (on the process group's thread) while backward still computes the earlier layers' - overlap hides it.
// What it costs: back to one collective per parameter (rung 1's per-call cost, now paid during backward),
// and a hook per parameter. The hook is the runtime's post-accumulate hook (TensorImpl's
// add_post_accumulate_hook, runtime/tensor/tensor.h): it runs once per backward, after all of a parameter's
// uses have been summed into .grad - the same hook DDP's reducer listens to.
#include "examples/ladder/ladder.h"
#include "runtime/distributed/tensor_comm_buffer.h"

namespace ddp::ladder {
namespace {

class HookPerParameter final : public GradientSync {
 public:
  explicit HookPerParameter(const RungContext& ctx) : GradientSync(ctx), params_(ctx.model->parameters()) {
    broadcast_parameters(*ctx.model, *ctx.group);
    for (const Tensor& p : params_)
      p.impl()->add_post_accumulate_hook(this, [this](TensorImpl& param) {
        // Launch and return at once: backward goes on while the group all-reduces this gradient.
        works_.push_back(ctx_.group->allreduce(comm_buffer_of(Tensor(param.grad)), dist::ReduceOp::Avg));
      });
  }
  ~HookPerParameter() override {
    for (const Tensor& p : params_) p.impl()->remove_post_accumulate_hooks(this);
    for (auto& w : works_) wait_quietly(*w);  // never leave a collective writing into a gradient we gave up
  }

  void finish() override {
    std::vector<std::shared_ptr<dist::Work>> works = std::move(works_);
    works_.clear();
    if (works.size() != params_.size()) {  // a parameter got no gradient: wait out the others, then name it
      for (auto& w : works) wait_quietly(*w);
      for (const Tensor& p : params_) gradient_of(p, "rung 3");
    }
    for (auto& w : works) w->wait();  // the exposed part: what backward did not hide
  }

 private:
  std::vector<Tensor> params_;
  std::vector<std::shared_ptr<dist::Work>> works_;
};

}  // namespace

std::unique_ptr<GradientSync> make_rung3(const RungContext& ctx) {
  return std::make_unique<HookPerParameter>(ctx);
}

}  // namespace ddp::ladder

#ifndef LADDER_NO_MAIN  // the tests link the rungs without their main()
int main(int argc, char** argv) {
  return ddp::ladder::rung_main(argc, argv, "ladder_rung3_hooks",
                                "per-parameter hooks launch an asynchronous all-reduce as each gradient is "
                                "ready during backward; wait at the end.",
                                ddp::ladder::make_rung3);
}
#endif
