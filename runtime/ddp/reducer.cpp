// reducer.cpp - bucket layout and slots, the gradient-ready hook, in-order launch, end-of-backward finalize,
// the unused-parameter error, the one-time bucket rebuild (agreed by all ranks), and the Join shadow of a
// backward. Read reducer.h first.
#include "runtime/ddp/reducer.h"

#include <algorithm>
#include <sstream>

#include "runtime/autograd/engine.h"
#include "runtime/core/log.h"
#include "runtime/ddp/step_explain.h"
#include "runtime/distributed/comm_buffer_of.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/sim/bucket_assignment.h"
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
  default_hook_ = dynamic_cast<AllreduceHook*>(opt_.comm_hook.get()) != nullptr;
  sharded_ = opt_.comm_hook->result_is_sharded();
  DDP_CHECK(!(sharded_ && opt_.gradient_as_bucket_view), "DDP: gradient_as_bucket_view is not supported with ",
            "the ", opt_.comm_hook->name(), " hook (ZeRO-2/3): a rank keeps only its shard of each averaged "
            "gradient, there is no whole bucket for .grad to view; turn gradient_as_bucket_view off");
  DDP_CHECK(opt_.bucket_pad_multiple >= 1, "Reducer: bucket_pad_multiple ", opt_.bucket_pad_multiple, " < 1");
  // A given layout (ZeRO-3's units) or a sharded state laid out over the buckets: never rebuilt.
  if (!opt_.layout.empty() || sharded_) opt_.rebuild_buckets = false;
  if (opt_.static_graph && opt_.find_unused_parameters) {
    DDP_LOG(Info, "DDP: static_graph makes find_unused_parameters redundant (unused parameters are known after "
                  "the first synchronized iteration); the per-iteration search is off");
    opt_.find_unused_parameters = false;
  }
  opt_.comm_hook->attach(this);
  opt_.comm_hook->check_parameters(params_);
  DDP_CHECK(!params_.empty(), "DDP: the module has no parameters; there is nothing to synchronize");
  divide_factor_ = pg_->size();
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;  // reverse registration order
  // Before the layout broadcast, which carries rank 0's choice to every rank.
  explain_number_ = opt_.explain_iteration > 0 ? opt_.explain_iteration : explain_iteration_from_env();
  Layout mine = layout_for(order);
  if (!opt_.layout.empty()) {
    std::vector<uint8_t> seen(params_.size(), 0);
    size_t count = 0;
    for (auto& bucket : opt_.layout) {
      DDP_CHECK(!bucket.empty(), "Reducer: ReducerOptions::layout has an empty bucket");
      for (size_t i : bucket) {
        DDP_CHECK(i < params_.size() && !seen[i], "Reducer: ReducerOptions::layout must name each of the ",
                  params_.size(), " parameters exactly once (", i, " is out of range or repeated)");
        seen[i] = 1;
        ++count;
      }
    }
    DDP_CHECK(count == params_.size(), "Reducer: ReducerOptions::layout names ", count, " of ", params_.size(),
              " parameters");
    mine = opt_.layout;
  }
  build_buckets(layout_of_rank0(mine));  // ranks with different caps still agree
  used_last_.assign(params_.size(), 1);
  ready_.assign(params_.size(), 0);
  locally_used_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) index_of_.emplace(params_[i].tensor.impl(), i);
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].tensor.impl()->add_post_accumulate_hook(this,
                                                       [this, i](TensorImpl&) { on_gradient_ready(i); });
  // A parameter without .grad gets its next gradient written straight into its bucket slot by the op that
  // computes it (linear), so on_gradient_ready has nothing to copy - when offers_destination says so.
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].tensor.impl()->grad_destination = {this, [this, i]() -> std::shared_ptr<TensorImpl> {
                                                    return offers_destination(i) ? slot_view(i).impl_ptr()
                                                                                 : nullptr;
                                                  }};
  DDP_LOG(Detail, "reducer: ", params_.size(), " parameters in ", buckets_.size(), " buckets\n",
          describe_buckets());
}

Reducer::~Reducer() {
  for (auto& p : params_) {
    p.tensor.impl()->remove_post_accumulate_hooks(this);
    if (p.tensor.impl()->grad_destination.first == this) p.tensor.impl()->grad_destination = {nullptr, {}};
  }
  wait_for_outstanding_work();
}

Reducer::Layout Reducer::layout_for(const std::vector<size_t>& order) const {
  std::vector<BucketParamInfo> infos;
  for (auto& p : params_) infos.push_back({p.tensor.nbytes(), p.tensor.dtype(), p.tensor.device()});
  return assign_buckets(infos, order, static_cast<size_t>(opt_.first_bucket_mb * kMiB),
                        static_cast<size_t>(opt_.bucket_cap_mb * kMiB));
}

Reducer::Layout Reducer::layout_of_rank0(const Layout& mine) {
  if (pg_->size() == 1) return mine;
  // Flat: [number of buckets, size of each bucket (padded to n), the parameter indices in bucket order, the
  // iteration to explain].
  const size_t n = params_.size();
  std::vector<int64_t> flat(1 + 2 * n + 1, 0);
  flat[2 * n + 1] = explain_number_;
  flat[0] = static_cast<int64_t>(mine.size());
  size_t at = 1 + n;
  for (size_t b = 0; b < mine.size(); ++b) {
    flat[1 + b] = static_cast<int64_t>(mine[b].size());
    for (size_t i : mine[b]) flat[at++] = static_cast<int64_t>(i);
  }
  Tensor t = Tensor::from_data<int64_t>(flat, {static_cast<int64_t>(flat.size())});
  {
    dist::FlightIssuer who("ddp bucket layout");
    host_broadcast(*pg_, t, 0);
  }
  const int64_t* v = t.data<int64_t>();
  auto bad = [&](const std::string& why) {
    DDP_FAIL("rank ", pg_->rank(), ": DDP: the bucket layout broadcast by rank 0 does not fit this rank's ",
             n, " parameters (", why, "): the ranks' models differ. Every rank must build the same model.");
  };
  if (v[0] < 1 || v[0] > static_cast<int64_t>(n)) bad(std::to_string(v[0]) + " buckets");
  Layout layout(static_cast<size_t>(v[0]));
  std::vector<uint8_t> seen(n, 0);
  at = 1 + n;
  for (size_t b = 0; b < layout.size(); ++b) {
    if (v[1 + b] < 1 || at + static_cast<size_t>(v[1 + b]) > flat.size()) bad("bucket sizes");
    for (int64_t k = 0; k < v[1 + b]; ++k) {
      const int64_t i = v[at++];
      if (i < 0 || i >= static_cast<int64_t>(n) || seen[static_cast<size_t>(i)])
        bad("not a permutation of the parameters");
      seen[static_cast<size_t>(i)] = 1;
      const Tensor& p = params_[static_cast<size_t>(i)].tensor;
      if (!layout[b].empty()) {
        const Tensor& first = params_[layout[b].front()].tensor;
        if (p.dtype() != first.dtype() || p.device() != first.device())
          bad("bucket " + std::to_string(b) + " mixes dtypes or devices");
      }
      layout[b].push_back(static_cast<size_t>(i));
    }
  }
  if (at != 1 + 2 * n) bad("bucket sizes do not add up to the parameter count");
  // Explain is collective: rank 0's choice holds for all, so ranks that were told different numbers (a
  // DDP_EXPLAIN set for some ranks only) neither hang nor pair the wrong collectives.
  if (v[2 * n + 1] != explain_number_) {
    DDP_LOG(Warn, "rank ", pg_->rank(), ": DDP: this rank was asked to explain iteration ", explain_number_,
            " (0: none), rank 0 iteration ", v[2 * n + 1], "; following rank 0 (give every rank the same "
            "--explain / DDP_EXPLAIN)");
    explain_number_ = v[2 * n + 1];
  }
  return layout;
}

void Reducer::build_buckets(const Layout& groups) {
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
    const int64_t pad = opt_.bucket_pad_multiple;
    bk.numel = (total + pad - 1) / pad * pad;
    const Tensor& first = params_[bk.params.front()].tensor;
    // In the memory the backend communicates best from (shm: a shared segment its all-reduce works on in
    // place); every rank allocates its buckets in the same order (rank 0's layout). A sharding hook's
    // buckets are allocated when used (buffer_of) and freed after their reduce-scatter.
    if (!sharded_) bk.buffer = comm_tensor(*pg_, bk.numel, first.dtype(), first.device(), &bk.in_comm_memory);
    // Default mode: a second buffer, so that .grad may view the first one after the step (docs/ddp-step.md,
    // "write-back"). Allocated here, right after the first, so that every rank allocates its communication
    // buffers in the same order (shm names them by that order).
    if (!sharded_ && !opt_.gradient_as_bucket_view)
      bk.spare = comm_tensor(*pg_, bk.numel, first.dtype(), first.device());
    bk.pending = bk.params.size();
    bk.timing.index = b;
    bk.timing.bytes = bk.numel * static_cast<int64_t>(dtype_size(first.dtype()));
    bk.timing.num_params = bk.params.size();
    bk.flight_params = params_[bk.params.front()].name;
    if (bk.params.size() > 1) bk.flight_params += " .. " + params_[bk.params.back()].name;
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

Tensor Reducer::slot_view(size_t index) {
  const Slot& s = slots_[index];
  const Tensor& p = params_[index].tensor;
  return buffer_of(buckets_[s.bucket]).slice0(s.offset, s.offset + p.numel()).view(p.shape());
}

Tensor& Reducer::buffer_of(Bucket& b) {
  if (!b.chosen) [[unlikely]]
    choose_buffer(b);
  if (!b.buffer.defined()) [[unlikely]] {
    const Tensor& first = params_[b.params.front()].tensor;
    b.buffer = Tensor::zeros({b.numel}, first.dtype(), first.device());
    bucket_bytes_live_ += static_cast<int64_t>(b.buffer.nbytes());
    bucket_bytes_peak_ = std::max(bucket_bytes_peak_, bucket_bytes_live_);
  }
  return b.buffer;
}

void Reducer::choose_buffer(Bucket& b) {
  b.chosen = true;
  if (!b.spare.defined() || b.lent.expired()) return;  // nothing lent from `buffer` is alive: it is ours
  if (b.spare_lent.expired()) {
    std::swap(b.buffer, b.spare);
    std::swap(b.lent, b.spare_lent);
    return;
  }
  // Both held: the write-back never leaves it so (it lends only while the other buffer is free), but should
  // it happen, the caller keeps both and this iteration takes fresh memory.
  b.buffer = Tensor::zeros({b.numel}, b.buffer.dtype(), b.buffer.device());
  b.lent.reset();
}

Tensor Reducer::lend(Bucket& b) {
  // A storage of its own over the same memory: what the caller holds is told apart from the reducer's and
  // the process group's own references (work, hooks) by this storage alone.
  std::shared_ptr<Storage> real = b.buffer.storage();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::wrap(real->data(), real->nbytes(), real->device(),
                                [keep = real]() mutable { keep.reset(); });
  impl->offset = b.buffer.impl()->offset;
  impl->shape = b.buffer.shape();
  impl->dtype = b.buffer.dtype();
  b.lent = impl->storage;
  return Tensor(std::move(impl));
}

void Reducer::release_finished_buffers(bool all) {
  for (size_t k = 0; k < next_to_launch_ && k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (!b.buffer.defined() || !b.work) continue;
    if (!all && !b.work->is_completed()) continue;
    // .grad of its parameters may be the bucket's memory (a destination): the result is the shard, not it.
    for (size_t i : b.params)
      if (params_[i].tensor.grad().defined() && params_[i].tensor.grad().storage() == b.buffer.storage())
        params_[i].tensor.set_grad(Tensor());
    bucket_bytes_live_ -= static_cast<int64_t>(b.buffer.nbytes());
    b.buffer = Tensor();
  }
}

void Reducer::begin_timing() {
  const Device dev = params_.empty() ? Device::cpu() : params_.front().tensor.device();
  // Device events only where the backend records them (NCCL); Gloo staging keeps host time.
  timing_->begin(dev, dev.is_cuda() && pg_->records_device_events(), buckets_.size());
}

void Reducer::number_iterations_from(int64_t next) {
  first_iteration_number_ = next - synchronized_iterations_;
}

std::string Reducer::iteration_name(int64_t number) const {
  return opt_.advice.iteration + " " + std::to_string(number);
}

const IterationStats& Reducer::last_stats() const {
  if (last_stats_pending_) {
    last_timing_->fill(last_stats_);
    last_stats_pending_ = false;
  }
  return last_stats_;
}

double Reducer::since_forward() const {
  return std::chrono::duration<double>(Clock::now() - forward_end_).count();
}

void Reducer::set_divide_factor(int ranks) {
  DDP_CHECK(ranks >= 1 && ranks <= pg_->size(), "Reducer::set_divide_factor: ", ranks, " ranks; expected 1..",
            pg_->size());
  divide_factor_ = ranks;
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  forward_end_ = Clock::now();
  begin_timing();
  if (!sync_) return;
  explain_armed_ = explain_number_ > 0 && explain_number_ == first_iteration_number_ + synchronized_iterations_;
  if (explain_armed_) [[unlikely]]
    explain_ready_s_.assign(params_.size(), -1.0);
  if (backward_started_) {
    // A backward that died midway (an op threw) left buckets in flight: wait for them (or, on CUDA, make
    // this stream wait) before this iteration writes into their buffers again.
    wait_for_outstanding_work();
    reset_iteration();
  }
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

bool Reducer::offers_destination(size_t index) const {
  if (!opt_.gradient_as_bucket_view) {
    // Default mode: .grad is the slot only until write_back, which gives it a tensor of its own (one copy per
    // step instead of two). A no_sync() backward (no write-back follows) gets no destination, so .grad never
    // outlives a backward as bucket memory; nor does a parameter with a post-accumulate hook besides ours:
    // that hook would see bucket memory (divided by the world size once ours ran, rewritten next step).
    if (!sync_) return false;
    const auto& hooks = params_[index].tensor.impl()->post_accumulate_hooks;
    if (hooks.size() != 1 || hooks.front().first != this) return false;
  }
  if (!sync_) return true;  // gradient_as_bucket_view under no_sync(): .grad is the slot anyway
  // Marked ready in this backward: the slot is the bucket's (maybe in flight), not the parameter's.
  if (ready_[index]) return false;
  // static_graph: this rank gave it no gradient in iteration 1; marked ready (zeros) when backward starts.
  if (opt_.static_graph && iteration_ > 0 && index < static_expected_hooks_.size() &&
      static_expected_hooks_[index] == 0)
    return false;
  return true;
}

void Reducer::on_gradient_ready(size_t index) {
  locally_used_[index] = 1;
  if (!sync_) return;  // no_sync(): the gradient stays in .grad and accumulates
  if (opt_.static_graph) {
    static_graph_on_hook(index);
    return;
  }
  if (!backward_started_) begin_backward();
  mark_ready(index, /*observed=*/true);
}

void Reducer::begin_backward() {
  backward_started_ = true;
  autograd::queue_end_of_backward_callback([this] { finalize(); });
  if (expect_unused_marking_) {
    expect_unused_marking_ = false;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (reachable_[i] || ready_[i]) continue;
      ++unused_marked_;
      mark_ready(i, /*observed=*/false);  // contributes zeros (or what earlier no_sync steps accumulated)
    }
  }
}

void Reducer::mark_ready(size_t index, bool observed) {
  const std::string& name = params_[index].name;
  DDP_CHECK(
      !ready_[index], "rank ", pg_->rank(), ": DDP: parameter ", name, " (index ", index,
      ") was marked ready twice in one backward. Likely causes: the parameter is shared by two modules that "
      "both run in one forward under different DDP wrappers, a reentrant backward (e.g. activation "
      "checkpointing) ran over it, or find_unused_parameters marked it unused although the loss uses it "
      "outside the module's outputs (pass every tensor the loss depends on to prepare_for_backward).");
  ready_[index] = 1;
  if (explain_armed_) [[unlikely]]
    explain_ready_s_[index] = since_forward();
  if (observed && !rebuilt_ && !opt_.static_graph) ready_order_.push_back(index);
  if (trace::tracing_enabled()) [[unlikely]]
    trace::trace_instant("ready " + name, "ddp");

  Tensor slot = slot_view(index);
  Tensor grad = params_[index].tensor.grad();
  const double inv = 1.0 / divide_factor_;
  // Divide here unless the all-reduce divides, or the divisor is 1 (x * 1 == x: a pass for nothing).
  const bool divide = !folds_division(buckets_[slots_[index].bucket]) && divide_factor_ != 1;
  if (grad.defined()) {
    const bool is_view = grad.storage() == slot.storage() && grad.impl()->offset == slot.impl()->offset;
    if (is_view) {
      // gradient_as_bucket_view: backward accumulated straight into the bucket
      if (divide) {
        scale_(slot, inv);
        ++gradients_scaled_;
      }
    } else {
      ++gradients_copied_;
      if (divide)
        copy_scaled_(slot, grad, inv);  // copy and divide in one pass
      else
        slot.copy_from(grad);
      if (opt_.gradient_as_bucket_view) params_[index].tensor.set_grad(slot);
    }
  } else {
    slot.zero_();
  }
  if (opt_.static_graph) {
    // A gradient the graph did not announce (a hook firing after this one, static_graph_on_hook) may still
    // come in this backward; it must not be added to a bucket that may be in flight. So .grad leaves the
    // bucket until write_back puts the averaged gradient there (no destination is offered meanwhile: ready_).
    Tensor g = params_[index].tensor.grad();
    if (g.defined() && g.storage() == slot.storage()) params_[index].tensor.set_grad(Tensor());
  }
  Bucket& b = buckets_[slots_[index].bucket];
  if (--b.pending == 0) {
    b.timing.ready_s = since_forward();
    timing_->bucket_ready(b.timing.index);
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
  if (sharded_) release_finished_buffers(/*all=*/false);  // what already went frees memory during backward
  if (next_to_launch_ == buckets_.size() && opt_.find_unused_parameters && !used_map_work_) {
    // The used-map travels right after the last bucket: which parameters any rank used.
    used_map_ = Tensor::from_data<int32_t>(locally_used_, {static_cast<int64_t>(locally_used_.size())});
    if (pg_->device_memory_only())
      used_map_ = used_map_.to(params_.front().tensor.device());  // e.g. NCCL: device memory
    dist::FlightIssuer who("ddp used-map");
    used_map_work_ = pg_->allreduce(comm_buffer_of(used_map_), dist::ReduceOp::Sum);
  }
}

void Reducer::launch(Bucket& b) {
  b.launched_at = Clock::now();
  b.timing.launched_s = std::chrono::duration<double>(b.launched_at - forward_end_).count();
  GradBucket gb;
  gb.index = b.timing.index;
  gb.is_last = b.timing.index + 1 == buckets_.size();
  gb.buffer = buffer_of(b);
  gb.average = folds_division(b);
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]].tensor;
    gb.gradients.push_back(b.buffer.slice0(b.offsets[k], b.offsets[k] + p.numel()).view(p.shape()));
  }
  {
    dist::FlightIssuer who(bucket_issuer_, static_cast<int>(b.timing.index), b.timing.bytes,
                           b.flight_params.c_str());
    b.work = opt_.comm_hook->run(*pg_, gb);
  }
  timing_->bucket_launched(b.timing.index, b.work, b.launched_at);
}

bool Reducer::folds_division(const Bucket& b) const {
  return default_hook_ && b.in_comm_memory && divide_factor_ == pg_->size();
}

void Reducer::finish_communication() {
  for (auto& b : buckets_) {
    b.work->wait();
    const auto finished = b.work->finished_at();  // the collective's own end, not when we looked
    b.completed_at = finished.time_since_epoch().count() != 0 ? finished : Clock::now();
    b.timing.completed_s = std::chrono::duration<double>(b.completed_at - forward_end_).count();
    timing_->bucket_completed(b.timing.index);
    if (trace::tracing_enabled()) [[unlikely]] {
      // Labelled: index, bytes, and the parameters it holds (first and last in bucket order).
      auto& tr = trace::global_tracer();
      tr.complete((sharded_ ? "reduce-scatter bucket " : "allreduce bucket ") + std::to_string(b.timing.index),
                  "comm", trace::kCommLane,
                  tr.to_trace_ns(b.launched_at), tr.to_trace_ns(b.completed_at),
                  {{"bucket", static_cast<int64_t>(b.timing.index)},
                   {"bytes", b.timing.bytes},
                   {"params", static_cast<int64_t>(b.params.size())}},
                  {{"first_param", params_[b.params.front()].name}, {"last_param", params_[b.params.back()].name}});
    }
  }
  if (used_map_work_) used_map_work_->wait();
  if (sharded_) release_finished_buffers(/*all=*/true);
}

void Reducer::write_back() {
  // After the work's wait. On a GPU this copy synchronizes the host with the compute stream (the host must
  // know which parameters no rank used, to leave their grad none): measured as used_map_sync_s.
  const auto t_used = Clock::now();
  Tensor used_host = used_map_.defined() ? used_map_.to(Device::cpu()) : Tensor();
  if (used_map_.defined())
    timing_->used_map_sync(std::chrono::duration<double>(Clock::now() - t_used).count());
  const int32_t* used = used_host.defined() ? used_host.data<int32_t>() : nullptr;
  for (size_t i = 0; i < params_.size(); ++i)
    used_last_[i] = (used && used[i] == 0) || (opt_.static_graph && static_unused_[i]) ? 0 : 1;
  if (sharded_) {
    // The hook reduce-scattered every bucket; its owner adds the results into the gradient shards. A
    // synchronized backward leaves no whole gradient behind.
    for (auto& p : params_) p.tensor.set_grad(Tensor());
    opt_.comm_hook->sharded_results_ready(used_last_);
    return;
  }
  // Default mode: .grad views its bucket through a storage lent to the caller, unless the caller still
  // holds a gradient lent from the bucket's other buffer - then the next iteration needs this one, and .grad
  // gets a tensor of its own (docs/ddp-step.md, "write-back").
  std::vector<Tensor> lent(buckets_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (used && used[i] == 0) continue;  // no rank used it: grad stays as it was (none), optimizers skip it
    if (opt_.static_graph && static_unused_[i]) continue;
    Tensor slot = slot_view(i);
    Tensor& p = params_[i].tensor;
    Bucket& b = buckets_[slots_[i].bucket];
    if (opt_.gradient_as_bucket_view) {
      Tensor g = p.grad();
      const bool is_view =
          g.defined() && g.storage() == slot.storage() && g.impl()->offset == slot.impl()->offset;
      if (!is_view) p.set_grad(slot);  // already the view (in-place zero_grad): keep it, allocate nothing
    } else if (p.grad().defined() && p.grad().storage() != slot.storage()) {
      Tensor g = p.grad();
      g.copy_from(slot);
    } else if (b.spare.defined() && b.spare_lent.expired()) {
      // none, or the slot itself (backward wrote into it): a view of the bucket, lent
      Tensor& whole = lent[slots_[i].bucket];
      if (!whole.defined()) whole = lend(b);
      p.set_grad(whole.slice0(slots_[i].offset, slots_[i].offset + p.numel()).view(p.shape()));
    } else {
      ++gradients_cloned_;
      p.set_grad(slot.clone());  // a tensor of its own
    }
  }
}

void Reducer::finalize() {
  const int64_t number = first_iteration_number_ + synchronized_iterations_++;
  if (opt_.static_graph && iteration_ == 0) {
    static_recorded_number_ = number;
    static_graph_end_of_first_backward();
  }
  const auto t0 = Clock::now();
  timing_->finalize_begin();
  IterationStats stats;
  stats.iteration = number;  // the errors' number, and train's step
  stats.num_reachability_searches = searches_;
  stats.backward_compute_s = since_forward();
  const double backward_compute_s = stats.backward_compute_s;
  stats.num_unused_marked = unused_marked_;
  stats.num_gradients_copied = gradients_copied_;
  stats.num_gradients_scaled = gradients_scaled_;
  stats.unused_search_s = unused_search_s_;
  trace::trace_instant("finalize", "ddp");

  // Parameters that got no gradient (find_unused_parameters off): all-reduce zeros for them anyway, so this
  // rank issues exactly the collectives the others issue, then raise below.
  std::vector<size_t> unready;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) unready.push_back(i);
  for (size_t i : unready) {
    slot_view(i).zero_();
    ready_[i] = 1;
    --buckets_[slots_[i].bucket].pending;
  }
  // static_graph: parameters whose hook fired after they were ready (reset_iteration clears the list). With
  // the unready ones: the graph changed, and the error says so instead of the unused-parameter one.
  const std::vector<size_t> changed = static_changed_;
  const bool graph_changed = opt_.static_graph && (!unready.empty() || !changed.empty());
  try {
    launch_ready_buckets();  // overlap off, or the zeros above: everything left goes now
    finish_communication();
  } catch (const std::exception& e) {
    wait_for_outstanding_work();
    reset_iteration();
    if (graph_changed) raise_graph_changed(unready, changed, e.what());
    if (!unready.empty()) raise_unready(unready, e.what(), number);
    throw;
  }
  // Also on the error path: this rank's .grad then holds the same averaged gradients as every other rank's,
  // so a rank that catches the error and steps keeps its replica identical to the others.
  write_back();
  stats.num_gradients_cloned = gradients_cloned_;
  if (!changed.empty()) static_graph_drop_unannounced(changed);

  if (unready.empty()) {
    for (auto& b : buckets_) stats.buckets.push_back(b.timing);
    double first_launch = 1e300, last_done = 0;
    for (auto& t : stats.buckets) {
      first_launch = std::min(first_launch, t.launched_s);
      last_done = std::max(last_done, t.completed_s);
    }
    stats.communication_s = stats.buckets.empty() ? 0 : last_done - first_launch;
    const auto exposed_end = Clock::now();
    stats.exposed_communication_s = std::chrono::duration<double>(exposed_end - t0).count();
    if (trace::tracing_enabled()) [[unlikely]] {
      // The step waiting for its buckets after backward's last node (and writing the averages back).
      auto& tr = trace::global_tracer();
      tr.complete("exposed communication", "exposed", trace::kComputeLane, tr.to_trace_ns(t0),
                  tr.to_trace_ns(exposed_end), {{"iteration", number}});
    }
    timing_->finalize_end();
    // Host clock: the step timing's numbers now; device clock: when read (last_stats()), without a sync here.
    std::swap(timing_, last_timing_);
    last_stats_ = std::move(stats);
    last_stats_pending_ = true;
    if (!last_timing_->on_device() || log::enabled(log::Level::Info)) last_stats();  // INFO on a GPU: syncs
    DDP_LOG(Info, last_stats_.summary(opt_.advice.iteration));
    if (log::enabled(log::Level::Detail)) [[unlikely]] {
      // DETAIL: each bucket's times and the parameters that got no gradient here, by name.
      std::string names;
      for (size_t i = 0; i < params_.size(); ++i)
        if (!locally_used_[i]) names += " " + params_[i].name;
      DDP_LOG(Detail, iteration_name(number), " buckets:\n", last_stats_.bucket_times(),
              names.empty() ? "" : "  no gradient on this rank:" + names + "\n");
    }
    ++iteration_;
  }
  // Collectives: every rank reaches them, on the error path too.
  maybe_explain(number, /*shadow=*/false, backward_compute_s,
                unready.empty() ? last_stats_.exposed_communication_s
                                : std::chrono::duration<double>(Clock::now() - t0).count());
  maybe_rebuild(unready.empty() && changed.empty());
  reset_iteration();
  if (graph_changed) raise_graph_changed(unready, changed, "");
  if (!unready.empty()) raise_unready(unready, "", number);
}

void Reducer::shadow_backward() {
  DDP_CHECK(!backward_started_, "rank ", pg_->rank(),
            ": DDP Join: shadow_backward called while this rank's own backward is running");
  const int64_t number = first_iteration_number_ + synchronized_iterations_++;  // the others' iteration's
  for (auto& b : buckets_) {
    buffer_of(b).zero_();
    b.pending = 0;
  }
  std::fill(ready_.begin(), ready_.end(), 1);
  std::fill(locally_used_.begin(), locally_used_.end(), 0);  // the used-map: this rank used nothing
  bucket_issuer_ = "join shadow";
  struct RestoreIssuer {
    const char*& tag;
    ~RestoreIssuer() { tag = "ddp bucket"; }
  } restore{bucket_issuer_};
  dist::FlightIssuer who("join shadow");
  try {
    if (opt_.static_graph && static_unused_.empty()) {
      // The others' first static_graph backward all-reduces the used-map before its buckets
      // (reducer_static_graph.cpp); this rank joined before running one: it shadows that too, with nothing
      // used, and learns which parameters no rank uses.
      const auto n = static_cast<int64_t>(params_.size());
      Tensor used = Tensor::zeros({n}, DType::I32);
      host_allreduce(*pg_, used, dist::ReduceOp::Sum);
      static_unused_.assign(params_.size(), 0);
      for (size_t i = 0; i < params_.size(); ++i) static_unused_[i] = used.data<int32_t>()[i] == 0 ? 1 : 0;
    }
    launch_ready_buckets();
    finish_communication();
  } catch (...) {
    wait_for_outstanding_work();
    reset_iteration();
    throw;
  }
  write_back();          // .grad: the others' averaged gradients (a joined ZeRO rank steps its shard with them)
  maybe_explain(number, /*shadow=*/true, 0, 0);
  maybe_rebuild(false);  // no rebuild from an iteration this rank did not compute
  reset_iteration();
}

void Reducer::wait_for_outstanding_work() {
  // Gloo: blocks until the collective finished. NCCL: the current stream waits for it, so the next kernel
  // that writes the bucket runs after the all-reduce read it. Errors were (or will be) reported elsewhere.
  auto settle = [](const std::shared_ptr<dist::Work>& w) {
    if (!w) return;
    try {
      w->wait();
    } catch (...) {
    }
  };
  for (auto& b : buckets_) settle(b.work);
  settle(used_map_work_);
}

void Reducer::reset_iteration() {
  if (sharded_)
    for (auto& b : buckets_)
      if (b.buffer.defined()) {
        bucket_bytes_live_ -= static_cast<int64_t>(b.buffer.nbytes());
        b.buffer = Tensor();
      }
  backward_started_ = false;
  expect_unused_marking_ = false;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(locally_used_.begin(), locally_used_.end(), 0);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
    b.chosen = false;
  }
  next_to_launch_ = 0;
  used_map_ = Tensor();
  used_map_work_.reset();
  unused_marked_ = 0;
  gradients_copied_ = 0;
  gradients_scaled_ = 0;
  gradients_cloned_ = 0;
  searches_ = 0;
  unused_search_s_ = 0;
  ready_order_.clear();  // a failed iteration's order must not leak into the next one's
  static_changed_.clear();
}

void Reducer::maybe_rebuild(bool this_rank_ok) {
  if (rebuilt_ || !opt_.rebuild_buckets) return;
  // Every rank decides the same: rebuild only if the iteration succeeded on all of them (a rank that raised
  // the unused-parameter error, or a Join shadow, says no). One int per iteration, until the rebuild.
  Tensor ok = Tensor::from_data<int32_t>({this_rank_ok ? 1 : 0}, {1});
  {
    dist::FlightIssuer who("ddp rebuild vote");
    host_allreduce(*pg_, ok, dist::ReduceOp::Min);
  }
  if (ok.data<int32_t>()[0] == 1) rebuild_from_ready_order();
}

void Reducer::rebuild_from_ready_order() {
  // The measured order of the parameters whose hooks fired; a parameter without a gradient in this
  // iteration (find_unused_parameters) keeps its place of the default order, right after its predecessor
  // there - not first, where its early "ready" would put it and hold bucket 0 back in later iterations.
  const size_t n = params_.size();
  std::vector<uint8_t> observed(n, 0);
  for (size_t i : ready_order_) observed[i] = 1;
  std::vector<size_t> front;                  // unobserved, before any observed one in default order
  std::vector<std::vector<size_t>> after(n);  // after[i]: the unobserved ones that follow observed i there
  size_t last_observed = SIZE_MAX;
  for (size_t k = n; k-- > 0;) {  // the default order: reverse registration
    if (observed[k])
      last_observed = k;
    else if (last_observed != SIZE_MAX)
      after[last_observed].push_back(k);
    else
      front.push_back(k);
  }
  std::vector<size_t> order = front;
  for (size_t i : ready_order_) {
    order.push_back(i);
    order.insert(order.end(), after[i].begin(), after[i].end());
  }
  DDP_CHECK(order.size() == n, "DDP internal: rebuild order has ", order.size(), " of ", n, " parameters");
  // Rank 0's layout (bucket boundaries included) decides for everyone: buckets must be identical.
  build_buckets(layout_of_rank0(layout_for(order)));
  rebuilt_ = true;
  DDP_LOG(Detail, "reducer: buckets rebuilt from the measured gradient-ready order\n", describe_buckets());
}

void Reducer::raise_unready(const std::vector<size_t>& unready, const std::string& comm_error,
                            int64_t number) {
  const bool alone = pg_->size() == 1;
  std::ostringstream os;
  os << "rank " << pg_->rank() << ": DDP finished this backward but " << unready.size()
     << " parameter(s) received no gradient in " << iteration_name(number)
     << " (they took no part in computing the loss):\n";
  for (size_t i : unready)
    os << "    [" << i << "] " << params_[i].name << "  shape " << shape_str(params_[i].tensor.shape())
       << "\n";
  const std::string& enable = opt_.advice.enable_find_unused_parameters;
  os << "  Fix one of:\n"
     << "    1. "
     << (enable.empty() ? "construct DistributedDataParallel with find_unused_parameters = true" : enable)
     << " (costs a graph traversal per " << opt_.advice.iteration << "), or\n"
     << "    2. if the layers of these parameters ran in the forward but their output did not take part in "
        "the loss, make it take part in the loss (e.g. add 0 * output.sum() to it). This cannot help a layer "
        "the forward did not run (a branch not taken, an expert not chosen): its parameters get no gradient "
        "either way, and only 1 helps.\n";
  if (alone && comm_error.empty())
    os << "  DDP needs every parameter's gradient at any world size, 1 included. This rank's "
       << (sharded_ ? "gradient shard" : ".grad") << " holds the gradients of this backward (zeros for the "
       << "parameters above).";
  else if (alone)
    os << "  The buckets' communication failed too: " << comm_error;
  else if (comm_error.empty() && sharded_)
    os << "  The other ranks were kept in step: the missing gradients were reduce-scattered as zeros, and "
          "this rank's gradient shard holds the same averages as the others' hold of theirs, so catching this "
          "error and stepping keeps the ranks consistent.";
  else if (comm_error.empty())
    os << "  The other ranks were kept in step: the missing gradients were all-reduced as zeros, and this "
          "rank's .grad holds the same averaged gradients as theirs, so catching this error and stepping "
          "keeps the replicas identical.";
  else
    os << "  Keeping the other ranks in step failed too: " << comm_error;
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
       << static_cast<double>(buckets_[b].timing.bytes) / kMiB << " MiB:";
    for (size_t i : buckets_[b].params) os << " " << params_[i].name;
    os << "\n";
  }
  return os.str();
}

std::string IterationStats::bucket_times() const {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed;
  for (const BucketTiming& b : buckets)
    os << "  bucket " << b.index << " (" << b.num_params << " params, " << b.bytes << " B): full "
       << b.ready_s * 1e3 << " ms, issued " << b.launched_s * 1e3 << " ms, done " << b.completed_s * 1e3
       << " ms after forward\n";
  return os.str();
}

std::string IterationStats::summary(const std::string& word) const {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed << word << " " << iteration << ": backward " << backward_compute_s * 1e3 << " ms, comm "
     << communication_s * 1e3 << " ms, exposed " << exposed_communication_s * 1e3 << " ms (" << buckets.size()
     << " buckets";
  if (num_unused_marked) os << ", " << num_unused_marked << " unused marked";
  if (num_gradients_copied) os << ", " << num_gradients_copied << " gradients copied into buckets";
  if (num_gradients_cloned) os << ", " << num_gradients_cloned << " cloned out (.grad of an earlier step held)";
  if (unused_search_s > 0) os << ", unused search " << unused_search_s * 1e3 << " ms";
  os << ")";
  return os.str();
}

}  // namespace ddp
