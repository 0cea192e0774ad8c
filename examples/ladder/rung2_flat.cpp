// rung2_flat.cpp - rung 2 of the ladder (docs/ladder.md): after backward, copy every gradient into one flat
// buffer, all-reduce it once, copy the averages back.
// The idea over rung 1: a collective has a fixed cost per call (a round trip between the ranks, a wake-up of
// the communication thread), so one large all-reduce is cheaper than many small ones.
// What it costs: two extra copies of every gradient, a buffer as large as the model, and still every byte is
// sent after backward - nothing overlaps compute.
#include "examples/ladder/ladder.h"
#include "runtime/distributed/tensor_comm_buffer.h"

namespace ddp::ladder {
namespace {

class FlatBuffer final : public GradientSync {
 public:
  explicit FlatBuffer(const RungContext& ctx) : GradientSync(ctx), params_(ctx.model->parameters()) {
    broadcast_parameters(*ctx.model, *ctx.group);
    int64_t numel = 0;
    for (const Tensor& p : params_) {
      DDP_CHECK(p.dtype() == params_[0].dtype() && p.device() == params_[0].device(), "rung 2: parameter '",
                p.name(), "' differs in dtype or device from the first; one flat buffer needs one of each");
      offsets_.push_back(numel);
      numel += p.numel();
    }
    flat_ = Tensor::empty({numel}, params_[0].dtype(), params_[0].device());
  }

  void finish() override {
    for (size_t i = 0; i < params_.size(); ++i) slot(i).copy_from(gradient_of(params_[i], "rung 2"));
    ctx_.group->allreduce(comm_buffer_of(flat_), dist::ReduceOp::Avg)->wait();  // the one collective
    for (size_t i = 0; i < params_.size(); ++i) params_[i].grad().copy_from(slot(i));
  }

 private:
  // Parameter i's stretch of the flat buffer, shaped like the parameter (a view: no copy).
  Tensor slot(size_t i) const {
    return flat_.slice0(offsets_[i], offsets_[i] + params_[i].numel()).view(params_[i].shape());
  }

  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;
  Tensor flat_;
};

}  // namespace

std::unique_ptr<GradientSync> make_rung2(const RungContext& ctx) { return std::make_unique<FlatBuffer>(ctx); }

}  // namespace ddp::ladder

#ifndef LADDER_NO_MAIN  // the tests link the rungs without their main()
int main(int argc, char** argv) {
  return ddp::ladder::rung_main(argc, argv, "ladder_rung2_flat",
                                "one flat buffer: copy the gradients in, one all-reduce, copy them out.",
                                ddp::ladder::make_rung2);
}
#endif
