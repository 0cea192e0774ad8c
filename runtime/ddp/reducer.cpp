// reducer.cpp - bucket slots, the gradient-ready hook, in-order launch, end-of-backward finalize, the
// unused-parameter error, and the one-time bucket rebuild. Read reducer.h first.
#include "runtime/ddp/reducer.h"

#include <algorithm>
#include <sstream>

#include "runtime/autograd/engine.h"
#include "runtime/core/log.h"
#include "runtime/ddp/bucket_assignment.h"
#include "runtime/ddp/host_collectives.h"
#include "runtime/tensor/tensor_math.h"
#include "runtime/trace/trace.h"

namespace ddp {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
using Clock = std::chrono::steady_clock;

}  // namespace

Reducer::Reducer(std::vector<nn::NamedTensor> params, std::shared_ptr<dist::ProcessGroup> pg,
                 ReducerOptions options)
    : params_(std::move(params)), pg_(std::move(pg)), opt_(options) {
  DDP_CHECK(pg_ != nullptr, "Reducer: no process group");
  DDP_CHECK(opt_.bucket_cap_mb > 0 && opt_.first_bucket_mb > 0, "Reducer: bucket_cap_mb (",
            opt_.bucket_cap_mb, ") and first_bucket_mb (", opt_.first_bucket_mb, ") must be > 0");
  for (auto& p : params_) {
    DDP_CHECK(p.tensor.requires_grad() && p.tensor.is_leaf(), "DDP: parameter ", p.name,
              " must be a leaf that requires grad");
    DDP_CHECK(dtype_is_floating(p.tensor.dtype()), "DDP: parameter ", p.name, " has dtype ",
              dtype_name(p.tensor.dtype()), "; gradients need a floating dtype");
  }
  if (!opt_.comm_hook) opt_.comm_hook = std::make_shared<AllreduceHook>();
  if (opt_.static_graph && opt_.find_unused_parameters) {
    DDP_LOG(Info, "DDP: static_graph makes find_unused_parameters redundant (unused parameters are known after "
                  "iteration 1); the per-iteration search is off");
    opt_.find_unused_parameters = false;
  }
  opt_.comm_hook->attach(this);
  opt_.comm_hook->check_parameters(params_);
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;  // reverse registration order
  build_buckets(order);
  ready_.assign(params_.size(), 0);
  locally_used_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) index_of_.emplace(params_[i].tensor.impl(), i);
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].tensor.impl()->add_post_accumulate_hook(this,
                                                       [this, i](TensorImpl&) { on_gradient_ready(i); });
  DDP_LOG(Detail, "reducer: ", params_.size(), " parameters in ", buckets_.size(), " buckets\n",
          describe_buckets());
}

Reducer::~Reducer() {
  for (auto& p : params_) p.tensor.impl()->remove_post_accumulate_hooks(this);
  for (auto& b : buckets_) {
    if (!b.work) continue;
    try {
      b.work->wait();
    } catch (...) {
      // already reported to whoever waited; a destructor must not throw
    }
  }
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  std::vector<BucketParamInfo> infos;
  for (auto& p : params_) infos.push_back({p.tensor.nbytes(), p.tensor.dtype(), p.tensor.device()});
  auto groups = assign_buckets(infos, order, static_cast<size_t>(opt_.first_bucket_mb * kMiB),
                               static_cast<size_t>(opt_.bucket_cap_mb * kMiB));
  std::vector<Bucket> buckets(groups.size());
  slots_.assign(params_.size(), Slot{});
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket& bk = buckets[b];
    bk.params = groups[b];
    int64_t total = 0;
    for (size_t i : bk.params) {
      bk.offsets.push_back(total);
      slots_[i] = {b, total};
      total += params_[i].tensor.numel();
    }
    const Tensor& first = params_[bk.params.front()].tensor;
    bk.buffer = Tensor::zeros({total}, first.dtype(), first.device());
    bk.pending = bk.params.size();
    bk.timing.index = b;
    bk.timing.bytes = static_cast<int64_t>(bk.buffer.nbytes());
    bk.timing.num_params = bk.params.size();
  }
  // Gradients that already live in old buckets move to their new slots.
  std::vector<Tensor> old_grads;
  if (opt_.gradient_as_bucket_view)
    for (auto& p : params_) old_grads.push_back(p.tensor.grad());
  buckets_ = std::move(buckets);
  if (opt_.gradient_as_bucket_view) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!old_grads[i].defined()) continue;
      Tensor slot = slot_view(i);
      slot.copy_from(old_grads[i]);
      params_[i].tensor.set_grad(slot);
    }
  }
}

Tensor Reducer::slot_view(size_t index) const {
  const Slot& s = slots_[index];
  const Tensor& p = params_[index].tensor;
  return buckets_[s.bucket].buffer.slice0(s.offset, s.offset + p.numel()).view(p.shape());
}

double Reducer::since_forward() const {
  return std::chrono::duration<double>(Clock::now() - forward_end_).count();
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  forward_end_ = Clock::now();
  if (!sync_) return;
  if (backward_started_)
    reset_iteration();  // a backward that died mid-way (an op threw) leaves nothing behind
  if (!opt_.find_unused_parameters) return;
  ++searches_;
  const auto t0 = Clock::now();
  reachable_.assign(params_.size(), 0);
  autograd::for_each_reachable_leaf(outputs, [this](TensorImpl* leaf) {
    auto it = index_of_.find(leaf);
    if (it != index_of_.end()) reachable_[it->second] = 1;
  });
  expect_unused_marking_ = true;
  unused_search_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
}

void Reducer::on_gradient_ready(size_t index) {
  locally_used_[index] = 1;
  if (!sync_) return;  // no_sync(): the gradient stays in .grad and accumulates
  if (opt_.static_graph) {
    static_graph_on_hook(index);
    return;
  }
  if (!backward_started_) begin_backward();
  mark_ready(index);
}

void Reducer::begin_backward() {
  backward_started_ = true;
  autograd::queue_end_of_backward_callback([this] { finalize(); });
  if (expect_unused_marking_) {
    expect_unused_marking_ = false;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (reachable_[i] || ready_[i]) continue;
      ++unused_marked_;
      mark_ready(i);  // contributes zeros (or what earlier no_sync steps accumulated)
    }
  }
}

void Reducer::mark_ready(size_t index) {
  const std::string& name = params_[index].name;
  DDP_CHECK(
      !ready_[index], "rank ", pg_->rank(), ": DDP: parameter ", name, " (index ", index,
      ") was marked ready twice in one backward. Likely causes: the parameter is shared by two modules that "
      "both run in one forward under different DDP wrappers, a reentrant backward (e.g. activation "
      "checkpointing) ran over it, or find_unused_parameters marked it unused although the loss uses it "
      "outside the module's outputs (pass every tensor the loss depends on to prepare_for_backward).");
  ready_[index] = 1;
  if (iteration_ == 0 && !rebuilt_ && !opt_.static_graph) ready_order_.push_back(index);
  if (trace::tracing_enabled()) [[unlikely]]
    trace::trace_instant("ready " + name, "ddp");

  Tensor slot = slot_view(index);
  Tensor grad = params_[index].tensor.grad();
  const double inv_world = 1.0 / pg_->size();
  if (grad.defined()) {
    const bool is_view = grad.storage() == slot.storage() && grad.impl()->offset == slot.impl()->offset;
    if (is_view) {
      scale_(slot, inv_world);
    } else {
      copy_scaled_(slot, grad, inv_world);  // copy and divide in one pass
      if (opt_.gradient_as_bucket_view) params_[index].tensor.set_grad(slot);
    }
  } else {
    slot.zero_();
  }
  Bucket& b = buckets_[slots_[index].bucket];
  if (--b.pending == 0) {
    b.timing.ready_s = since_forward();
    if (opt_.overlap) launch_ready_buckets();
  }
}

void Reducer::launch_ready_buckets() {
  // Strictly in index order: a ready bucket waits for every earlier one, so all ranks issue the same
  // sequence.
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    launch(buckets_[next_to_launch_]);
    ++next_to_launch_;
  }
  if (next_to_launch_ == buckets_.size() && opt_.find_unused_parameters && !used_map_work_) {
    // The used-map travels right after the last bucket: which parameters any rank used.
    used_map_ = Tensor::from_data<int32_t>(locally_used_, {static_cast<int64_t>(locally_used_.size())});
    if (pg_->backend_name() == "nccl")
      used_map_ = used_map_.to(params_.front().tensor.device());  // NCCL: device memory
    used_map_work_ = pg_->allreduce(comm_buffer_of(used_map_), dist::ReduceOp::Sum);
  }
}

void Reducer::launch(Bucket& b) {
  b.launched_at = Clock::now();
  b.timing.launched_s = std::chrono::duration<double>(b.launched_at - forward_end_).count();
  GradBucket gb;
  gb.index = b.timing.index;
  gb.is_last = b.timing.index + 1 == buckets_.size();
  gb.buffer = b.buffer;
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]].tensor;
    gb.gradients.push_back(b.buffer.slice0(b.offsets[k], b.offsets[k] + p.numel()).view(p.shape()));
  }
  b.work = opt_.comm_hook->run(*pg_, gb);
}

void Reducer::finish_communication() {
  for (auto& b : buckets_) {
    b.work->wait();
    const auto finished = b.work->finished_at();  // the collective's own end, not when we looked
    b.completed_at = finished.time_since_epoch().count() != 0 ? finished : Clock::now();
    b.timing.completed_s = std::chrono::duration<double>(b.completed_at - forward_end_).count();
    if (trace::tracing_enabled()) [[unlikely]] {
      auto& tr = trace::global_tracer();
      tr.complete("allreduce bucket " + std::to_string(b.timing.index), "comm", trace::kCommLane,
                  tr.to_trace_ns(b.launched_at), tr.to_trace_ns(b.completed_at),
                  {{"bucket", static_cast<int64_t>(b.timing.index)}, {"bytes", b.timing.bytes}});
    }
  }
  if (used_map_work_) used_map_work_->wait();
}

void Reducer::write_back() {
  Tensor used_host = used_map_.defined() ? used_map_.to(Device::cpu()) : Tensor();  // after the work's wait
  const int32_t* used = used_host.defined() ? used_host.data<int32_t>() : nullptr;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (used && used[i] == 0) continue;  // no rank used it: grad stays as it was (none), optimizers skip it
    if (opt_.static_graph && static_unused_[i]) continue;
    Tensor slot = slot_view(i);
    Tensor& p = params_[i].tensor;
    if (opt_.gradient_as_bucket_view) {
      p.set_grad(slot);
    } else if (p.grad().defined()) {
      Tensor g = p.grad();
      g.copy_from(slot);
    } else {
      p.set_grad(slot.clone());
    }
  }
}

void Reducer::finalize() {
  if (opt_.static_graph && iteration_ == 0) static_graph_end_of_first_backward();
  const auto t0 = Clock::now();
  IterationStats stats;
  stats.iteration = iteration_;
  stats.num_reachability_searches = searches_;
  stats.backward_compute_s = since_forward();
  stats.num_unused_marked = unused_marked_;
  stats.unused_search_s = unused_search_s_;
  trace::trace_instant("finalize", "ddp");

  std::vector<size_t> unready;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) unready.push_back(i);
  if (!unready.empty()) {
    // Keep the process group in step with the other ranks before raising: launch what is left (zeros for the
    // missing gradients) and wait, so no collective of this rank stays half-issued.
    for (size_t i : unready) {
      slot_view(i).zero_();
      ready_[i] = 1;
      --buckets_[slots_[i].bucket].pending;
    }
    try {
      launch_ready_buckets();
      finish_communication();
    } catch (...) {
      // the error below is the one that explains what happened
    }
    reset_iteration();
    raise_unready(unready);
  }

  launch_ready_buckets();  // overlap off: everything goes now
  finish_communication();
  write_back();

  for (auto& b : buckets_) stats.buckets.push_back(b.timing);
  double first_launch = 1e300, last_done = 0;
  for (auto& t : stats.buckets) {
    first_launch = std::min(first_launch, t.launched_s);
    last_done = std::max(last_done, t.completed_s);
  }
  stats.communication_s = stats.buckets.empty() ? 0 : last_done - first_launch;
  stats.exposed_communication_s = std::chrono::duration<double>(Clock::now() - t0).count();
  stats.finalize_s = stats.exposed_communication_s;
  last_stats_ = std::move(stats);
  DDP_LOG(Info, last_stats_.summary());

  ++iteration_;
  reset_iteration();
  if (iteration_ == 1 && opt_.rebuild_buckets && !rebuilt_) rebuild_from_ready_order();
}

void Reducer::reset_iteration() {
  backward_started_ = false;
  expect_unused_marking_ = false;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(locally_used_.begin(), locally_used_.end(), 0);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
  }
  next_to_launch_ = 0;
  used_map_ = Tensor();
  used_map_work_.reset();
  unused_marked_ = 0;
  searches_ = 0;
  unused_search_s_ = 0;
}

void Reducer::rebuild_from_ready_order() {
  // Rank 0's observed order decides for everyone: buckets must be identical on all ranks.
  const size_t n = params_.size();
  std::vector<int64_t> order;
  std::vector<uint8_t> seen(n, 0);
  for (size_t i : ready_order_) {
    order.push_back(static_cast<int64_t>(i));
    seen[i] = 1;
  }
  for (size_t k = n; k-- > 0;)
    if (!seen[k]) order.push_back(static_cast<int64_t>(k));
  Tensor t = Tensor::from_data<int64_t>(order, {static_cast<int64_t>(n)});
  host_broadcast(*pg_, t, 0);
  const int64_t* o = t.data<int64_t>();
  std::vector<size_t> final_order(o, o + n);
  std::vector<uint8_t> check(n, 0);
  for (size_t i : final_order) {
    DDP_CHECK(i < n && !check[i], "DDP: the bucket order broadcast by rank 0 is not a permutation of ", n,
              " parameters: the ranks' models differ");
    check[i] = 1;
  }
  build_buckets(final_order);
  ready_order_.clear();
  rebuilt_ = true;
  DDP_LOG(Detail, "reducer: buckets rebuilt from the measured gradient-ready order\n", describe_buckets());
}

void Reducer::raise_unready(const std::vector<size_t>& unready) {
  std::ostringstream os;
  os << "rank " << pg_->rank() << ": DDP finished this backward but " << unready.size()
     << " parameter(s) received no gradient (they took no part in computing the loss):\n";
  for (size_t i : unready)
    os << "    [" << i << "] " << params_[i].name << "  shape " << shape_str(params_[i].tensor.shape())
       << "\n";
  os << "  Fix one of:\n"
     << "    1. construct DistributedDataParallel with find_unused_parameters = true (costs a graph "
        "traversal per "
        "iteration), or\n"
     << "    2. make every forward output take part in the loss (e.g. add 0 * output.sum()) so that every "
        "parameter gets a gradient.\n"
     << "  The other ranks were kept in step: the missing gradients were all-reduced as zeros.";
  throw Error(os.str());
}

std::vector<std::vector<size_t>> Reducer::bucket_layout() const {
  std::vector<std::vector<size_t>> out;
  for (auto& b : buckets_) out.push_back(b.params);
  return out;
}

std::string Reducer::describe_buckets() const {
  std::ostringstream os;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    os << "  bucket " << b << ": " << buckets_[b].params.size() << " params, "
       << static_cast<double>(buckets_[b].buffer.nbytes()) / kMiB << " MiB:";
    for (size_t i : buckets_[b].params) os << " " << params_[i].name;
    os << "\n";
  }
  return os.str();
}

std::string IterationStats::summary() const {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed << "iter " << iteration << ": backward " << backward_compute_s * 1e3 << " ms, comm "
     << communication_s * 1e3 << " ms, exposed " << exposed_communication_s * 1e3 << " ms (" << buckets.size()
     << " buckets";
  if (num_unused_marked) os << ", " << num_unused_marked << " unused marked";
  if (unused_search_s > 0) os << ", unused search " << unused_search_s * 1e3 << " ms";
  os << ")";
  return os.str();
}

}  // namespace ddp
