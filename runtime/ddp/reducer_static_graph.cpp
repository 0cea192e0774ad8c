// reducer_static_graph.cpp - the reducer's static_graph mode (ReducerOptions::static_graph), kept apart from
// the dynamic path in reducer.cpp. Iteration 1 learns the graph: each parameter's hook firings are counted and
// nothing is launched during backward; at the end of the outermost backward the used map is all-reduced once
// (which parameters no rank uses) and every parameter is marked ready, so all buckets go out then. From
// iteration 2 a parameter is ready when its hooks fired as often as in iteration 1, parameters that never
// fire here are marked ready (zeros) when backward starts, and there is no reachability search. If the graph
// changes after all, the backward goes on issuing every collective and its end raises (raise_graph_changed).
#include <algorithm>
#include <sstream>

#include "runtime/autograd/engine.h"
#include "runtime/ddp/reducer.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"

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
    // The graph changed: more firings than in iteration 1 (or any, for a parameter unused then). The
    // parameter is ready already and its bucket may be in flight, so this gradient is left out of the
    // average. Throwing here would leave the backward's remaining buckets unissued and pair this rank's next
    // buckets with the others' current ones; instead backward goes on, every collective goes out, and
    // finalize raises.
    if (std::find(static_changed_.begin(), static_changed_.end(), index) == static_changed_.end())
      static_changed_.push_back(index);
    return;
  }
  if (--static_pending_hooks_[index] == 0) mark_ready(index, /*observed=*/true);
}

void Reducer::static_graph_end_of_first_backward() {
  // Which parameters any rank used: all-reduced once, for all later iterations.
  const size_t n = params_.size();
  std::vector<int32_t> used(n);
  for (size_t i = 0; i < n; ++i) used[i] = static_expected_hooks_[i] > 0 ? 1 : 0;
  Tensor t = Tensor::from_data<int32_t>(used, {static_cast<int64_t>(n)});
  dist::FlightIssuer who("ddp static used-map");
  host_allreduce(*pg_, t, dist::ReduceOp::Sum);
  static_unused_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    static_unused_[i] = t.data<int32_t>()[i] == 0 ? 1 : 0;
    if (!static_expected_hooks_[i]) ++unused_marked_;
    mark_ready(i, /*observed=*/false);  // everything goes out now, in bucket order (no overlap in this iteration)
  }
}

void Reducer::static_graph_drop_unannounced(const std::vector<size_t>& changed) {
  // write_back skips these (no rank used them in iteration 1), so .grad still holds this rank's own gradient
  // from this backward; the ranks where the graph did not change have none.
  for (size_t i : changed)
    if (static_unused_[i]) params_[i].tensor.set_grad(Tensor());
}

void Reducer::raise_graph_changed(const std::vector<size_t>& unready, const std::vector<size_t>& changed,
                                  const std::string& comm_error) {
  const std::string first = iteration_name(static_recorded_number_);  // "iteration 1" unless renumbered
  const bool alone = pg_->size() == 1;
  std::ostringstream os;
  os << "rank " << pg_->rank() << ": DDP static_graph: Your training graph has changed since " << first
     << ", which static_graph promised would stay the same (the same parameters, each used as often, every "
        "iteration):\n";
  auto line = [&](size_t i) -> std::ostream& {
    return os << "    [" << i << "] " << params_[i].name << "  shape " << shape_str(params_[i].tensor.shape())
              << ": ";
  };
  for (size_t i : changed) {
    if (static_expected_hooks_[i] == 0)
      line(i) << "received a gradient, but this rank did not use it in " << first << "\n";
    else
      line(i) << "its gradient hook fired more often than the " << static_expected_hooks_[i]
              << " time(s) per backward of " << first << "\n";
  }
  for (size_t i : unready) {
    const int32_t fired = static_expected_hooks_[i] - static_pending_hooks_[i];
    if (fired == 0)
      line(i) << "received no gradient (" << first << ": " << static_expected_hooks_[i] << " per backward)\n";
    else
      line(i) << "its gradient hook fired fewer times (" << fired << ") than the "
              << static_expected_hooks_[i] << " per backward of " << first << "\n";
  }
  const std::string& disable = opt_.advice.disable_static_graph;
  os << "  Fix one of:\n"
     << "    1. make the graph really static: every iteration uses the same parameters, each as often (no "
        "data-dependent branch, skipped layer, or checkpointing that comes and goes), or\n"
     << "    2. " << (disable.empty() ? "construct DistributedDataParallel without static_graph" : disable)
     << ": the reducer then follows each iteration's graph (if some parameters then go unused, its error "
        "says what to set).\n";
  if (!comm_error.empty())
    os << (alone ? "  The buckets' communication failed too: "
                 : "  Keeping the other ranks in step failed too: ")
       << comm_error;
  else if (alone)
    os << "  Every bucket was reduced as usual: this rank's .grad leaves out a gradient that came after its "
          "parameter was ready and holds zeros for a missing one.";
  else
    os << "  The other ranks were kept in step: every bucket was all-reduced as usual (a gradient that came "
          "after its parameter was ready is left out of the average, a missing one counts as zeros), and "
          "this rank's .grad holds the same averaged gradients as theirs, so catching this error and "
          "continuing keeps the replicas identical. Ranks whose graph did not change raise nothing.";
  throw Error(os.str());
}

}  // namespace ddp
