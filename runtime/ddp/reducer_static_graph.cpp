// reducer_static_graph.cpp - the reducer's static_graph mode (ReducerOptions::static_graph), kept apart from
// the dynamic path in reducer.cpp. Iteration 1 learns the graph: each parameter's hook firings are counted and
// nothing is launched during backward; at the end of the outermost backward the used map is all-reduced once
// (which parameters no rank uses) and every parameter is marked ready, so all buckets go out then. From
// iteration 2 a parameter is ready when its hooks fired as often as in iteration 1, parameters that never
// fire here are marked ready (zeros) when backward starts, and there is no reachability search.
#include <sstream>

#include "runtime/autograd/engine.h"
#include "runtime/ddp/host_collectives.h"
#include "runtime/ddp/reducer.h"

namespace ddp {

void Reducer::static_graph_on_hook(size_t index) {
  const size_t n = params_.size();
  if (!backward_started_) {
    backward_started_ = true;
    // The outermost backward: a nested one (checkpointing) ends while gradients are still coming.
    autograd::queue_end_of_outermost_backward_callback([this] { finalize(); });
    if (iteration_ == 0) {
      static_expected_hooks_.assign(n, 0);
    } else {
      static_pending_hooks_ = static_expected_hooks_;
      for (size_t i = 0; i < n; ++i)
        if (static_expected_hooks_[i] == 0) {
          ++unused_marked_;
          mark_ready(i, /*observed=*/false);  // never used on this rank: contributes zeros, known since iteration 1
        }
    }
  }
  if (iteration_ == 0) {
    if (static_expected_hooks_[index]++ == 0 && !rebuilt_) ready_order_.push_back(index);
    return;
  }
  if (static_pending_hooks_[index] == 0) {
    // Keep the other ranks in step is impossible here (we cannot know what they expect): say what changed.
    std::ostringstream os;
    os << "rank " << pg_->rank() << ": DDP static_graph: parameter " << params_[index].name << " (index " << index
       << ") received a gradient " << (static_expected_hooks_[index] == 0 ? "but was unused" : "more often than")
       << " in iteration 1 (" << static_expected_hooks_[index]
       << " gradient hook(s) per backward). Your training graph has changed in this iteration; static_graph "
          "requires the same parameters used the same way every iteration. Construct DDP without static_graph "
          "(with find_unused_parameters = true if some parameters go unused).";
    throw Error(os.str());
  }
  if (--static_pending_hooks_[index] == 0) mark_ready(index, /*observed=*/true);
}

void Reducer::static_graph_end_of_first_backward() {
  // Which parameters any rank used: all-reduced once, for all later iterations.
  const size_t n = params_.size();
  std::vector<int32_t> used(n);
  for (size_t i = 0; i < n; ++i) used[i] = static_expected_hooks_[i] > 0 ? 1 : 0;
  Tensor t = Tensor::from_data<int32_t>(used, {static_cast<int64_t>(n)});
  host_allreduce(*pg_, t, dist::ReduceOp::Sum);
  static_unused_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    static_unused_[i] = t.data<int32_t>()[i] == 0 ? 1 : 0;
    if (!static_expected_hooks_[i]) ++unused_marked_;
    mark_ready(i, /*observed=*/false);  // everything goes out now, in bucket order (no overlap in this iteration)
  }
}

}  // namespace ddp
