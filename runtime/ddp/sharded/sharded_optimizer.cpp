// sharded_optimizer.cpp - segments of the shard as the inner optimizer's parameters; the step; Join.
#include "runtime/ddp/sharded/sharded_optimizer.h"

#include <algorithm>
#include <limits>

#include "runtime/ddp/join.h"
#include "runtime/distributed/comm_buffer_of.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "runtime/optim/state_check.h"

namespace ddp {

ShardedOptimizer::ShardedOptimizer(ShardedDataParallel& sdp, optim::OptimizerFactory make_inner)
    : optim::Optimizer({}, 0.0), sdp_(sdp), segments_(sdp.segments()) {
  DDP_CHECK(make_inner != nullptr, "ShardedOptimizer: no inner optimizer factory");
  std::vector<nn::NamedTensor> views;
  for (const auto& s : segments_) views.push_back({s.view.name(), s.view});
  params_ = views;
  inner_ = make_inner(views);
  DDP_CHECK(inner_ != nullptr, "ShardedOptimizer: the factory made no optimizer");
  lr_ = inner_->lr();
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::step() {
  ops::check_no_bf16_weight_cast("ShardedOptimizer::step");  // before any collective
  DDP_CHECK(under_join_ || !join_attached_to(sdp_.process_group()),
            "ShardedOptimizer: a Join is attached to this process group but this optimizer is not among its "
            "joinables: pass it in JoinOptions::joinables, so that a joined rank steps its shard too");
  step_shard(/*training=*/true);
}

void ShardedOptimizer::step_shard(bool training) {
  // Under Join: every rank at a step (or a named error on each); the clipping (the loop's, or the transform
  // on a joined rank) makes the same exchange first, once.
  if (under_join_) sdp_.join_step_point(training);
  if (!training && join_transform_) join_transform_();
  if (under_join_) {
    // A joined rank's learning rate may be stale (its schedule stopped): take the training ranks' one.
    Tensor lr = Tensor::from_data<double>({training ? lr_ : -std::numeric_limits<double>::infinity()}, {1});
    dist::FlightIssuer who("zero lr agreement");
    host_allreduce(sdp_.process_group(), lr, dist::ReduceOp::Max);
    lr_ = lr.data<double>()[0];
  }
  // The segments' .grad is the sharded .grad (none: skipped, as a plain optimizer skips a none .grad).
  inner_->set_lr(lr_);
  inner_->step();
  ++steps_;
  sdp_.after_step();
}

void ShardedOptimizer::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  inner_->load_state(state, steps);
  steps_ = steps;
}

void ShardedOptimizer::state_kinds(std::vector<std::string>& tensors, std::string& scalar) const {
  optim::StateKinds k = optim::state_kinds_of(*inner_);
  DDP_CHECK(!k.tensors.empty(), "ShardedOptimizer: consolidating the state of this inner optimizer is not ",
            "supported (SGD and AdamW are)");
  tensors = std::move(k.tensors);
  scalar = std::move(k.scalar);
}

std::map<std::string, Tensor> ShardedOptimizer::consolidated_state() {
  std::vector<std::string> kinds;
  std::string scalar;
  state_kinds(kinds, scalar);
  const auto mine = inner_->state();
  auto& pg = sdp_.process_group();
  const int world = pg.size();
  auto& buckets = sdp_.buckets();
  const auto& params = sdp_.parameters();
  std::map<std::string, Tensor> out;
  dist::FlightIssuer who("zero consolidate");
  for (size_t b = 0; b < buckets.size(); ++b) {
    auto& bk = buckets[b];
    const auto np = static_cast<int64_t>(bk.params.size());
    // Per parameter of the bucket: its step count where this rank holds a piece with state, else -1.
    Tensor flags = Tensor::full({np}, -1.0, DType::F64);
    for (auto& s : segments_) {
      if (s.bucket != b) continue;
      const std::string& seg = s.view.name();
      if (!mine.count(seg + "." + kinds.front())) continue;
      const auto k = std::find(bk.params.begin(), bk.params.end(), s.piece.param) - bk.params.begin();
      flags.data<double>()[k] = scalar.empty() ? 0.0 : mine.at(seg + "." + scalar).item();
    }
    Tensor all = Tensor::zeros({np * world}, DType::F64);
    host_allgather(pg, flags, all);
    for (const std::string& kind : kinds) {
      Tensor shard = Tensor::zeros({bk.shard.shard_numel}, bk.shard_params.dtype(), bk.shard_params.device());
      for (auto& s : segments_) {
        auto it = mine.find(s.view.name() + "." + kind);
        if (s.bucket != b || it == mine.end()) continue;
        shard.slice0(s.piece.shard_offset, s.piece.shard_offset + s.piece.numel()).copy_from(it->second);
      }
      Tensor whole = Tensor::empty({bk.shard.bucket_numel}, shard.dtype(), shard.device());
      pg.allgather(comm_buffer_of(shard), comm_buffer_of(whole))->wait();
      for (int64_t k = 0; k < np; ++k) {
        double step = -1;
        for (int r = 0; r < world; ++r) step = std::max(step, all.data<double>()[r * np + k]);
        if (step < 0) continue;  // never stepped (no rank used it yet): no state, as the plain optimizer
        const size_t i = bk.params[static_cast<size_t>(k)];
        const int64_t off = sdp_.reducer().slot_offset(i);
        const Tensor& p = params[i].tensor;
        out[params[i].name + "." + kind] = whole.slice0(off, off + p.numel()).view(p.shape()).clone();
        if (!scalar.empty())
          out[params[i].name + "." + scalar] = Tensor::from_data<int64_t>({static_cast<int64_t>(step)}, {});
      }
    }
  }
  return out;
}

void ShardedOptimizer::load_consolidated_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  std::vector<std::string> kinds;
  std::string scalar;
  state_kinds(kinds, scalar);
  const auto& params = sdp_.parameters();
  // The whole state against every parameter of the model, not only this rank's segments: every rank gives
  // the same verdict (and message), and a refused state changes nothing.
  optim::check_whole_state("ShardedOptimizer::load_consolidated_state", params, {kinds, scalar}, state,
                           steps);
  std::map<std::string, Tensor> mine;
  for (auto& s : segments_) {
    const std::string& pname = params[s.piece.param].name;
    for (const std::string& kind : kinds) {
      auto it = state.find(pname + "." + kind);
      if (it == state.end()) continue;
      mine[s.view.name() + "." + kind] =
          it->second.view({-1}).slice0(s.piece.param_begin, s.piece.param_end).clone();
    }
    if (!scalar.empty()) {
      auto it = state.find(pname + "." + scalar);
      if (it != state.end()) mine[s.view.name() + "." + scalar] = it->second.clone();
    }
  }
  inner_->load_state(mine, steps);
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
