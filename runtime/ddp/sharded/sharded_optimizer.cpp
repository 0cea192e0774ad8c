// sharded_optimizer.cpp - segments of the shard as the inner optimizer's parameters; the step; Join.
#include "runtime/ddp/sharded/sharded_optimizer.h"

#include <limits>

#include "runtime/ddp/host_collectives.h"
#include "runtime/ddp/join.h"
#include "runtime/distributed/flight_recorder.h"

namespace ddp {

ShardedOptimizer::ShardedOptimizer(ShardedDataParallel& sdp, optim::OptimizerFactory make_inner)
    : optim::Optimizer({}, 0.0), sdp_(sdp) {
  DDP_CHECK(make_inner != nullptr, "ShardedOptimizer: no inner optimizer factory");
  std::vector<nn::NamedTensor> views;
  auto& buckets = sdp_.buckets();
  const auto& params = sdp_.parameters();
  for (size_t b = 0; b < buckets.size(); ++b)
    for (const ShardSegment& s : buckets[b].shard.segments) {
      Tensor v = buckets[b].shard_params.slice0(s.shard_offset, s.shard_offset + s.numel());
      const std::string name = params[s.param].name + "[" + std::to_string(s.param_begin) + ":" +
                               std::to_string(s.param_end) + "]";
      v.set_name(name);
      segments_.push_back({b, s, v});
      views.push_back({name, v});
    }
  params_ = views;
  inner_ = make_inner(views);
  DDP_CHECK(inner_ != nullptr, "ShardedOptimizer: the factory made no optimizer");
  lr_ = inner_->lr();
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::step() {
  DDP_CHECK(under_join_ || !join_attached_to(sdp_.process_group()),
            "ShardedOptimizer: a Join is attached to this process group but this optimizer is not among its "
            "joinables: pass it in JoinOptions::joinables, so that a joined rank steps its shard too");
  step_shard(/*training=*/true);
}

void ShardedOptimizer::step_shard(bool training) {
  if (!training && join_transform_) join_transform_();
  if (under_join_) {
    // A joined rank's learning rate may be stale (its schedule stopped): take the training ranks' one.
    Tensor lr = Tensor::from_data<double>({training ? lr_ : -std::numeric_limits<double>::infinity()}, {1});
    dist::FlightIssuer who("zero lr agreement");
    host_allreduce(sdp_.process_group(), lr, dist::ReduceOp::Max);
    lr_ = lr.data<double>()[0];
  }
  auto& buckets = sdp_.buckets();
  for (auto& s : segments_) {
    Tensor v = s.view;
    if (sdp_.parameter_used(s.piece.param))
      v.set_grad(buckets[s.bucket].shard_grad.slice0(s.piece.shard_offset, s.piece.shard_offset + s.piece.numel()));
    else
      v.set_grad(Tensor());  // no rank used it: skipped, as DDP's optimizer skips a .grad that stayed none
  }
  inner_->set_lr(lr_);
  inner_->step();
  ++steps_;
  for (auto& s : segments_) {
    Tensor v = s.view;
    v.set_grad(Tensor());
  }
  sdp_.after_step();
}

void ShardedOptimizer::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  inner_->load_state(state, steps);
  steps_ = steps;
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (auto& [name, t] : inner_->state())
    if (t.defined() && t.numel() > 1) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

int ShardedOptimizer::state_bytes_per_param() const {
  int64_t elems = 0;
  for (auto& s : segments_) elems += s.piece.numel();
  const int64_t bytes = state_bytes();
  return elems > 0 ? static_cast<int>((bytes + elems / 2) / elems) : 0;
}

}  // namespace ddp
