// rung1_each.cpp - rung 1 of the ladder (docs/ladder.md): after backward, all-reduce every parameter's
// gradient, one collective per parameter, each waited for before the next starts.
// The idea: data parallelism itself - each rank runs forward and backward on its own slice of the batch,
// and the average of the ranks' gradients is the gradient of the whole batch: every replica takes one step.
// What it costs: every byte is sent after backward, while the processor has nothing else to do (all of it
// is exposed), and one collective per parameter pays the per-message latency once per parameter.
#include "examples/ladder/ladder.h"
#include "runtime/distributed/tensor_comm_buffer.h"

namespace ddp::ladder {
namespace {

class AllReduceEach final : public GradientSync {
 public:
  explicit AllReduceEach(const RungContext& ctx) : GradientSync(ctx) {
    broadcast_parameters(*ctx.model, *ctx.group);
  }

  void finish() override {
    for (const Tensor& p : ctx_.model->parameters()) {
      Tensor grad = gradient_of(p, "rung 1");
      ctx_.group->allreduce(comm_buffer_of(grad), dist::ReduceOp::Avg)->wait();  // in place: now the mean
    }
  }
};

}  // namespace

std::unique_ptr<GradientSync> make_rung1(const RungContext& ctx) {
  return std::make_unique<AllReduceEach>(ctx);
}

}  // namespace ddp::ladder

#ifndef LADDER_NO_MAIN  // the tests link the rungs without their main()
int main(int argc, char** argv) {
  return ddp::ladder::rung_main(argc, argv, "ladder_rung1_each",
                                "all-reduce every gradient after backward, one collective per parameter.",
                                ddp::ladder::make_rung1);
}
#endif
