// rung5_ddp.cpp - rung 5 of the ladder (docs/ladder.md): the runtime's own DistributedDataParallel, whose
// reducer (runtime/ddp/reducer.cpp) is rung 4 grown up.
// What it adds over rung 4 (docs/ddp-step.md walks each): the model is checked to be the same on every rank;
// the buckets are rebuilt once from the order gradients really arrived; gradients are divided by the world
// size while being copied in (or by the all-reduce itself, in place in shared memory on the shm backend, whose
// buckets live in memory the ranks share); linear's backward writes its gradients straight into their bucket
// slots when there is no .grad yet; the wait happens in an end-of-backward callback, so backward returns
// with the averages; unused parameters (find_unused_parameters), no_sync, Join, comm hooks and static_graph;
// and when ranks disagree, every rank still issues the same collectives and raises instead of hanging.
// What it costs: a larger piece of code (the reducer is about ten times this file), and its first
// iterations issue one extra small all-reduce (the agreement before the bucket rebuild).
#include "examples/ladder/ladder.h"
#include "runtime/ddp/distributed_data_parallel.h"

namespace ddp::ladder {
namespace {

DDPOptions options_for(const RungContext& ctx) {
  DDPOptions o;
  o.bucket_cap_mb = o.first_bucket_mb = ctx.bucket_mb;  // the same buckets as rung 4
  return o;
}

class WithDDP final : public GradientSync {
 public:
  explicit WithDDP(const RungContext& ctx) : GradientSync(ctx), ddp_(ctx.model, ctx.group, options_for(ctx)) {}

  Tensor forward(const Tensor& x) override { return ddp_.forward(x); }
  // finish(): nothing left to do - the reducer waited for its buckets before backward returned.
  double measured_exposed_s() override { return ddp_.reducer().last_stats().exposed_communication_s; }

 private:
  DistributedDataParallel ddp_;
};

}  // namespace

std::unique_ptr<GradientSync> make_rung5(const RungContext& ctx) { return std::make_unique<WithDDP>(ctx); }

}  // namespace ddp::ladder

#ifndef LADDER_NO_MAIN  // the tests link the rungs without their main()
int main(int argc, char** argv) {
  return ddp::ladder::rung_main(argc, argv, "ladder_rung5_ddp",
                                "the reducer itself: DistributedDataParallel with --bucket-mb buckets.",
                                ddp::ladder::make_rung5);
}
#endif
