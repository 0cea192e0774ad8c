// rung5_ddp.cpp - rung 5 of the ladder (docs/ladder.md): the runtime's own DistributedDataParallel, whose
// reducer (runtime/ddp/reducer.cpp) is rung 4 grown up.
// What it adds over rung 4 (docs/ddp-step.md walks each): the model is checked to be the same on every rank;
// the buckets are rebuilt once from the order gradients really arrived; gradients are divided by the world
// size while they are copied in, or by the all-reduce itself when the bucket lives in the backend's
// communication memory (shm: shared memory, all-reduced in place); an op writes a gradient straight into its
// bucket slot when the parameter has no .grad yet (one copy per step instead of rung 4's two); the wait runs
// in an end-of-backward callback, so backward returns with the averages; unused parameters
// (find_unused_parameters), no_sync, Join, comm hooks and static_graph; and when ranks disagree, every rank
// still issues the same collectives and raises instead of hanging.
// What it costs: more code (runtime/ddp/reducer.cpp alone is about six times rung 4's file), and until its
// bucket rebuild one extra small all-reduce per step (the ranks agreeing that the iteration succeeded).
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
  explicit WithDDP(const RungContext& ctx)
      : GradientSync(ctx), ddp_(ctx.model, ctx.group, options_for(ctx)) {}

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
