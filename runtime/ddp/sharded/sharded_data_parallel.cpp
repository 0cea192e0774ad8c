// sharded_data_parallel.cpp - ZeRO-2/3: the flat parameter buffers over the reducer's buckets, the units and
// their forward hooks and backward nodes, the agreed gather order with prefetch, resharding, the gradient
// shards' .grad (accumulated as .grad is), clipping. Under Join: sharded_join.cpp. Read
// sharded_data_parallel.h first; docs/sharding.md walks one step of each stage.
#include "runtime/ddp/sharded/sharded_data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "runtime/autograd/engine.h"
#include "runtime/autograd/node.h"
#include "runtime/core/log.h"
#include "runtime/ddp/sharded/join_announcements.h"
#include "runtime/ddp/sharded/reduce_scatter_hook.h"
#include "runtime/distributed/comm_buffer_of.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/tensor/multi_tensor_math.h"
#include "runtime/tensor/storageless.h"
#include "runtime/tensor/tensor_math.h"
#include "runtime/trace/trace.h"

namespace ddp {

using namespace zero3_join;

namespace {
using Clock = std::chrono::steady_clock;

// Identity in forward; its backward runs `fn` before any node of the computation that produced its input
// (ZeRO-3: a unit's parameters are gathered before its backward needs them).
class BackwardPreHook final : public autograd::Node {
 public:
  explicit BackwardPreHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) override {
    fn_();
    return {grad_outputs[0]};
  }
  const char* name() const override { return "ZeroBackwardPreHook"; }

 private:
  std::function<void()> fn_;
};

Tensor with_backward_pre_hook(const Tensor& y, std::function<void()> fn) {
  if (!y.defined() || !autograd::needs_grad({&y})) return y;
  Tensor out = y.detach();
  autograd::record(std::make_shared<BackwardPreHook>(std::move(fn)), {&y}, {&out});
  return out;
}

// Points parameter p at `numel` elements of `full` from element `offset` (no copy).
void bind(Tensor& p, const Tensor& full, int64_t offset) {
  p.impl()->storage = full.storage();
  p.impl()->offset = full.impl()->offset + offset;
}
void unbind(Tensor& p) { release_storage(p); }

bool is_index(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

ShardedDataParallel::ShardedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<dist::ProcessGroup> pg,
                                         ShardOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), opt_(std::move(options)) {
  DDP_CHECK(module_ && pg_, "ShardedDataParallel: no module or no process group");
  DDP_CHECK(opt_.stage == 2 || opt_.stage == 3, "ShardedDataParallel: ZeRO stage ", opt_.stage,
            " is not sharded here: stage 2 (gradients + optimizer state) or 3 (parameters too); stage 1 is "
            "ZeroRedundancyOptimizer over DistributedDataParallel, stage 0 plain DistributedDataParallel");
  DDP_CHECK(!opt_.ddp.comm_hook, "ShardedDataParallel: a comm hook is not supported with ZeRO-", opt_.stage,
            ": each bucket's communication is the reduce-scatter into this rank's shard");
  DDP_CHECK(!opt_.ddp.gradient_as_bucket_view, "ShardedDataParallel: gradient_as_bucket_view is not supported ",
            "with ZeRO-", opt_.stage, ": a rank keeps only its shard of each gradient; turn it off");
  DDP_CHECK(opt_.prefetch >= 0, "ShardedDataParallel: prefetch ", opt_.prefetch, " < 0");
  DDP_CHECK(!(opt_.gather_bf16 && opt_.stage != 3), "ShardedDataParallel: gather_bf16 is for ZeRO-3 only: ",
            "ZeRO-2's parameters stay whole, so a rank's own shard would stay exact while the others' arrived "
            "rounded to bfloat16 and the ranks would compute with different weights");
  gpg_ = opt_.gather_group ? opt_.gather_group : pg_;
  DDP_CHECK(gpg_->size() == pg_->size() && gpg_->rank() == pg_->rank(),
            "ShardedDataParallel: the gather group (rank ", gpg_->rank(), " of ", gpg_->size(),
            ") must have the ranks of the main group (rank ", pg_->rank(), " of ", pg_->size(), ")");
  DDP_CHECK(!(opt_.stage == 3 && pg_->size() > 1 && gpg_ == pg_),
            "ShardedDataParallel: ZeRO-3 needs ShardOptions::gather_group, a second process group over the same "
            "ranks (e.g. dist::new_process_group(env, store, backend, {.name = \"gather\"})): when ranks' "
            "graphs differ (an unused parameter, Join, a rank that raised), their parameter gathers and "
            "reduce-scatters interleave differently, which one group cannot carry in step");
  params_ = module_->named_parameters();
  DDPOptions d = opt_.ddp;
  hook_ = std::make_shared<ReduceScatterHook>();
  d.comm_hook = hook_;
  d.bucket_pad_multiple = shard_pad_multiple(pg_->size());
  d.sync_parameters_after_join = false;
  if (d.advice.enable_find_unused_parameters.empty())
    d.advice.enable_find_unused_parameters =
        "construct ShardedDataParallel with ShardOptions::ddp.find_unused_parameters = true";
  std::vector<std::vector<size_t>> unit_params;
  if (opt_.stage == 3) {
    unit_params = choose_units();
    // Launch order: the units in reverse registration order (backward reaches the last one first), the
    // root unit last (its first parameters - embeddings - get their gradients last).
    for (size_t k = units_.size(); k-- > 0;)
      if (units_[k].module) d.layout.push_back(unit_params[k]);
    if (has_root_unit()) d.layout.push_back(unit_params.back());
  }
  // Verifies the model across ranks and broadcasts rank 0's parameters, then builds the (padded) buckets.
  ddp_ = std::make_unique<DistributedDataParallel>(module_, pg_, d);
  build_buckets();
  if (opt_.stage == 3) {
    install_zero3_hooks();
  } else if (opt_.overlap_param_gather) {
    install_zero2_hooks();
  }
  DDP_LOG(Detail, "ZeRO-", opt_.stage, ": ", params_.size(), " parameters in ", buckets_.size(),
          " buckets, shard of rank ", pg_->rank(), ": ",
          buckets_.empty() ? 0 : buckets_.front().shard.shard_numel, " elements of bucket 0");
}

ShardedDataParallel::~ShardedDataParallel() {
  std::function<void(nn::Module&)> remove = [&](nn::Module& m) {
    m.remove_forward_hooks(this);
    for (auto& [n, c] : m.named_children()) remove(*c);
  };
  remove(*module_);
  for (auto& b : buckets_)
    if (b.gather) try {
        b.gather->wait();
      } catch (...) {
      }
  // ZeRO-3: the shards go with the wrapper; a parameter left without memory has none for good.
  for (auto& p : params_)
    if (!p.tensor.storage())
      set_storageless_reason(
          p.tensor.impl_ptr(),
          "it was a ZeRO-3 parameter and its ShardedDataParallel was destroyed, taking the "
          "shards (the values) with it. Keep the wrapper alive as long as the model is used, or "
          "copy the whole parameters out before it goes: inside sdp.gathered_parameters(), "
          "clone them, load them into another model or save a checkpoint");
}

std::vector<std::vector<size_t>> ShardedDataParallel::choose_units() {
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index.emplace(params_[i].tensor.impl(), i);
  std::vector<std::vector<size_t>> out;
  std::vector<uint8_t> taken(params_.size(), 0);
  std::vector<std::string> wanted = opt_.units;
  std::function<void(nn::Module&, const std::string&, const std::string&)> walk =
      [&](nn::Module& m, const std::string& name, const std::string& last) {
        const bool chosen = !name.empty() && (opt_.units.empty()
                                                  ? is_index(last) && m.num_parameters() > 0
                                                  : std::find(wanted.begin(), wanted.end(), name) != wanted.end());
        if (chosen) {
          std::vector<size_t> ps;
          for (auto& p : m.named_parameters()) {
            auto it = index.find(p.tensor.impl());
            if (it == index.end() || taken[it->second]) continue;
            taken[it->second] = 1;
            ps.push_back(it->second);
          }
          std::erase(wanted, name);
          DDP_CHECK(
              !ps.empty() || opt_.units.empty(), "ShardedDataParallel: ShardOptions::units names \"", name,
              "\", which holds no parameters (none at all, or only ones an earlier unit took): drop it from ",
              "the list");
          if (ps.empty()) return;  // default units: all its parameters are tied to an earlier unit's
          std::sort(ps.begin(), ps.end());
          units_.push_back({name, &m, 0});
          out.push_back(std::move(ps));
          return;  // a unit inside a unit is part of it
        }
        for (auto& [n, c] : m.named_children()) walk(*c, name.empty() ? n : name + "." + n, n);
      };
  walk(*module_, "", "");
  if (!wanted.empty()) refuse_unit(wanted.front());
  std::vector<size_t> root;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!taken[i]) root.push_back(i);
  if (!root.empty()) {
    units_.push_back({"(root)", nullptr, 0});
    out.push_back(std::move(root));
  }
  // The first forward gathers in registration order; the root (embeddings) first.
  if (has_root_unit()) forward_order_.push_back(units_.size() - 1);
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].module) forward_order_.push_back(u);
  return out;
}

void ShardedDataParallel::refuse_unit(const std::string& name) const {
  // A name the walk never reached: inside a unit chosen before it, or no module at all.
  for (const Unit& u : units_)
    DDP_CHECK(name.rfind(u.name + ".", 0) != 0, "ShardedDataParallel: ShardOptions::units names \"", name,
              "\", which is inside unit \"", u.name, "\": a unit holds every parameter of its module, ",
              "submodules included, so units do not nest; list either \"", u.name, "\" or modules inside it");
  std::string modules;
  int listed = 0;
  std::function<void(const nn::Module&, const std::string&)> walk = [&](const nn::Module& m,
                                                                        const std::string& prefix) {
    for (auto& [n, c] : m.named_children()) {
      const std::string full = prefix.empty() ? n : prefix + "." + n;
      if (c->num_parameters() > 0 && listed++ < 12) modules += (modules.empty() ? "" : ", ") + full;
      walk(*c, full);
    }
  };
  walk(*module_, "");
  DDP_FAIL("ShardedDataParallel: ShardOptions::units names \"", name, "\", which is no module of the model (",
           "modules holding parameters: ", modules, listed > 12 ? ", ..." : "", ")");
}

void ShardedDataParallel::build_buckets() {
  Reducer& r = reducer();
  const auto layout = r.bucket_layout();
  const int world = pg_->size(), rank = pg_->rank();
  buckets_.assign(layout.size(), Bucket{});
  for (size_t b = 0; b < layout.size(); ++b) {
    Bucket& bk = buckets_[b];
    bk.params = layout[b];
    std::vector<int64_t> offsets, numels;
    for (size_t i : bk.params) {
      offsets.push_back(r.slot_offset(i));
      numels.push_back(params_[i].tensor.numel());
    }
    bk.shard = shard_of_bucket(bk.params, offsets, numels, r.bucket_numel(b), world, rank);
    const Tensor& first = params_[bk.params.front()].tensor;
    Tensor full = Tensor::zeros({bk.shard.bucket_numel}, first.dtype(), first.device());
    for (size_t k = 0; k < bk.params.size(); ++k) {
      Tensor& p = params_[bk.params[k]].tensor;
      full.slice0(offsets[k], offsets[k] + numels[k]).view(p.shape()).copy_from(p);
    }
    const int64_t lo = bk.shard.shard_begin, hi = lo + bk.shard.shard_numel;
    if (opt_.stage == 2) {
      for (size_t k = 0; k < bk.params.size(); ++k) bind(params_[bk.params[k]].tensor, full, offsets[k]);
      bk.full = full;
      bk.shard_params = full.slice0(lo, hi);
    } else {
      bk.shard_params = full.slice0(lo, hi).clone();
      for (size_t i : bk.params) {
        unbind(params_[i].tensor);
        set_storageless_reason(params_[i].tensor.impl_ptr(), "");  // this wrapper's: its unit gathers it
      }
    }
    bk.shard_grad = Tensor::zeros({bk.shard.shard_numel}, first.dtype(), first.device());
    for (const ShardSegment& sg : bk.shard.segments) {
      Tensor v = bk.shard_params.slice0(sg.shard_offset, sg.shard_offset + sg.numel());
      v.set_name(params_[sg.param].name + "[" + std::to_string(sg.param_begin) + ":" +
                 std::to_string(sg.param_end) + "]");
      segments_.push_back({b, sg, v});
    }
  }
  if (opt_.stage == 3) {
    // The reducer keeps the given layout: bucket k holds unit (units - 1 - k) or, last, the root unit.
    const size_t m = units_.size() - (has_root_unit() ? 1 : 0);
    for (size_t u = 0; u < m; ++u) units_[u].bucket = m - 1 - u;
    if (m < units_.size()) units_.back().bucket = m;
    for (size_t u = 0; u < units_.size(); ++u) buckets_[units_[u].bucket].unit = static_cast<int>(u);
    gathered_.assign(units_.size(), 0);
    bound_.assign(units_.size(), 0);
    observed_.assign(units_.size(), 0);
  }
  hook_->set_owner(this);
}

// ---- ZeRO-2: parameters whole, gathered after the step, waited for per module ----

void ShardedDataParallel::install_zero2_hooks() {
  std::unordered_map<const TensorImpl*, size_t> bucket_of;
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b].params) bucket_of.emplace(params_[i].tensor.impl(), b);
  std::function<void(nn::Module&)> walk = [&](nn::Module& m) {
    std::vector<size_t> mine;  // buckets of the module's own (direct) parameters
    for (auto& p : m.named_parameters())
      if (p.name.find('.') == std::string::npos) {
        auto it = bucket_of.find(p.tensor.impl());
        if (it != bucket_of.end() && std::find(mine.begin(), mine.end(), it->second) == mine.end())
          mine.push_back(it->second);
      }
    if (!mine.empty())
      m.add_forward_hooks(
          this,
          [this, mine](nn::Module&) {
            for (size_t b : mine) wait_bucket_gather(buckets_[b]);
          },
          nullptr);
    for (auto& [n, c] : m.named_children()) walk(*c);
  };
  walk(*module_);
}

void ShardedDataParallel::wait_bucket_gather(Bucket& b) {
  if (!b.gather) return;
  const auto t0 = Clock::now();
  b.gather->wait();
  const auto t1 = Clock::now();
  gather_wait_s_ += std::chrono::duration<double>(t1 - t0).count();
  if (trace::tracing_enabled()) [[unlikely]] {
    // The gather on the comm lane (issue to its end) and, on the compute lane, the wait for it: what
    // trace_summary reports as waiting for parameter all-gathers.
    const auto index = static_cast<int64_t>(&b - buckets_.data());
    auto& tr = trace::global_tracer();
    const auto finished = b.gather->finished_at();
    const auto end = std::max(b.gather_issued, finished.time_since_epoch().count() != 0 ? finished : t1);
    tr.complete("all-gather bucket " + std::to_string(index), "gather", trace::kCommLane,
                tr.to_trace_ns(b.gather_issued), tr.to_trace_ns(end),
                {{"bucket", index}, {"bytes", static_cast<int64_t>(b.full.nbytes())}});
    if (t1 - t0 > std::chrono::microseconds(1))
      tr.complete("wait all-gather bucket " + std::to_string(index), "gather wait", trace::kComputeLane,
                  tr.to_trace_ns(t0), tr.to_trace_ns(t1), {{"bucket", index}});
  }
  b.gather.reset();
}

void ShardedDataParallel::after_step() {
  step_point_done_ = false;
  if (opt_.stage != 2) return;
  // In forward order: the last bucket holds the first layers.
  for (size_t k = buckets_.size(); k-- > 0;) {
    Bucket& b = buckets_[k];
    wait_bucket_gather(b);  // a step without a forward in between: the previous gather must land first
    const int64_t lo = b.shard.shard_begin, hi = lo + b.shard.shard_numel;
    const std::string names = params_[b.params.front()].name + " .. " + params_[b.params.back()].name;
    dist::FlightIssuer who("zero2 param gather", static_cast<int>(k), static_cast<int64_t>(b.full.nbytes()),
                           names.c_str());
    b.gather_issued = Clock::now();
    b.gather = gpg_->allgather(comm_buffer_of(b.full.slice0(lo, hi)), comm_buffer_of(b.full));
    ++gathers_issued_;
  }
}

// ---- the forward ----

Tensor ShardedDataParallel::forward(const Tensor& x) {
  before_forward();
  Tensor y = (*module_)(x);
  return after_forward({y}).front();
}

void ShardedDataParallel::before_forward() {
  // Under Join (ZeRO-3): a synchronized forward starts with the activity exchange on the main group; a joined
  // rank serving the gather group's announcements must first learn that it comes.
  announced_iteration_ = false;
  if (opt_.stage == 3 && announcing() && reducer().sync() && autograd::grad_enabled()) {
    announce(kNextIteration);
    announced_iteration_ = true;
  }
  ddp_->before_forward();
  if (opt_.stage == 2) {
    if (!opt_.overlap_param_gather)
      for (auto& b : buckets_) wait_bucket_gather(b);
    return;
  }
  DDP_CHECK(under_join_ || !join_attached_to(*pg_), "ShardedDataParallel: a Join is attached to this process ",
            "group but this ZeRO-3 wrapper is not among its joinables: pass it in JoinOptions::joinables (with ",
            "the ShardedOptimizer), so that a joined rank shadows the parameter gathers");
  // Every forward starts from rest (a rank that skipped a backward after catching an error included).
  if (phase_ != Phase::Idle) finish_phase();
  for (size_t u = 0; u < units_.size(); ++u) reshard(u);
  begin_phase(Phase::Forward);
  if (has_root_unit()) unit_needed(units_.size() - 1);
}

std::vector<Tensor> ShardedDataParallel::after_forward(const std::vector<Tensor>& outputs) {
  std::vector<Tensor> out = outputs;
  if (opt_.stage == 2) {
    for (auto& b : buckets_) wait_bucket_gather(b);  // no gather may run on into backward or the step
  } else {
    finish_phase();
    if (!order_agreed_) agree_forward_order();
    // The first node backward runs: it opens the backward phase (and its prefetch) and queues its end.
    for (auto& y : out)
      y = with_backward_pre_hook(y, [this] {
        if (phase_ == Phase::Backward) return;  // a second output of the same forward
        begin_phase(Phase::Backward);
        autograd::queue_end_of_backward_callback([this] { end_of_backward(); });
      });
  }
  ddp_->after_forward(out);
  return out;
}

// ---- ZeRO-3: units, phases, the agreed order ----

void ShardedDataParallel::install_zero3_hooks() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u].module) continue;
    units_[u].module->add_forward_hooks(
        this, [this, u](nn::Module&) { unit_needed(u); },
        [this, u](nn::Module&, const Tensor& y) -> Tensor {
          if (!opt_.reshard_after_forward || gathered_scopes_ > 0) return y;
          reshard(u);
          if (phase_ != Phase::Forward) return y;  // evaluation outside the wrapper: nothing to re-gather
          return with_backward_pre_hook(y, [this, u] { unit_needed(u); });
        });
  }
}

void ShardedDataParallel::begin_phase(Phase p) {
  phase_ = p;
  phase_order_.clear();
  if (p == Phase::Forward) {
    phase_order_ = forward_order_;
    std::fill(observed_.begin(), observed_.end(), 0);
    observed_order_.clear();
  } else if (opt_.reshard_after_forward) {
    for (size_t k = forward_order_.size(); k-- > 0;)
      if (units_[forward_order_[k]].module) phase_order_.push_back(forward_order_[k]);  // root stays gathered
  }
  position_.assign(units_.size(), SIZE_MAX);
  for (size_t k = 0; k < phase_order_.size(); ++k) position_[phase_order_[k]] = k;
  issued_ = 0;
  if (p == Phase::Backward && !phase_order_.empty() && opt_.prefetch > 0)
    issue_through(static_cast<size_t>(opt_.prefetch) - 1);
}

void ShardedDataParallel::issue_through(size_t through) {
  while (issued_ < phase_order_.size() && issued_ <= through) {
    const size_t u = phase_order_[issued_++];
    if (!gathered_[u]) issue_gather(u);
  }
}

void ShardedDataParallel::issue_gather(size_t u, bool exact) {
  announce(kGatherBase + 2 * static_cast<int64_t>(u) + (exact ? 1 : 0));
  Bucket& b = buckets_[units_[u].bucket];
  const int64_t lo = b.shard.shard_begin, hi = lo + b.shard.shard_numel;
  b.full = Tensor::empty({b.shard.bucket_numel}, b.shard_params.dtype(), b.shard_params.device());
  // What travels: the parameters' dtype, or bfloat16 widened into full when waited for (wait_and_bind).
  Tensor& wire = opt_.gather_bf16 && !exact ? b.low : b.full;
  if (&wire == &b.low) wire = Tensor::empty({b.shard.bucket_numel}, DType::BF16, b.shard_params.device());
  wire.slice0(lo, hi).copy_from(b.shard_params);
  {
    dist::FlightIssuer who("zero3 param gather", static_cast<int>(units_[u].bucket),
                           static_cast<int64_t>(wire.nbytes()), units_[u].name.c_str());
    b.gather_issued = Clock::now();
    b.gather = gpg_->allgather(comm_buffer_of(wire.slice0(lo, hi)), comm_buffer_of(wire));
  }
  ++gathers_issued_;
  gathered_[u] = 1;
  gathered_bytes_ += static_cast<int64_t>(b.full.nbytes());
  gathered_peak_ = std::max(gathered_peak_, gathered_bytes_);
}

void ShardedDataParallel::wait_and_bind(size_t u) {
  Bucket& b = buckets_[units_[u].bucket];
  wait_bucket_gather(b);
  if (b.low.defined()) {
    b.full.copy_from(b.low);  // bfloat16 -> the parameters' dtype
    b.low = Tensor();
  }
  for (size_t i : b.params) bind(params_[i].tensor, b.full, reducer().slot_offset(i));
  bound_[u] = 1;
}

void ShardedDataParallel::reshard(size_t u) {
  if (!gathered_[u]) return;
  Bucket& b = buckets_[units_[u].bucket];
  wait_bucket_gather(b);  // a collective writing into the memory must finish before it goes
  for (size_t i : b.params) unbind(params_[i].tensor);
  gathered_bytes_ -= static_cast<int64_t>(b.full.nbytes());
  b.full = Tensor();
  b.low = Tensor();
  gathered_[u] = 0;
  bound_[u] = 0;
}

void ShardedDataParallel::unit_needed(size_t u) {
  if (phase_ == Phase::Forward && !observed_[u]) {
    observed_[u] = 1;
    observed_order_.push_back(u);
  }
  const size_t pos = phase_ == Phase::Idle ? SIZE_MAX : position_[u];
  if (!gathered_[u]) {
    if (pos != SIZE_MAX && pos >= issued_)
      issue_through(pos);  // in its place of the agreed order, after everything before it
    else
      issue_gather(u);  // outside a phase (evaluation through the module itself) or run a second time in
                        // this phase: gathered on the spot (every rank must do the same)
  }
  if (pos != SIZE_MAX && opt_.prefetch > 0) issue_through(pos + static_cast<size_t>(opt_.prefetch));
  if (!bound_[u]) wait_and_bind(u);
}

void ShardedDataParallel::finish_phase() {
  // Units this rank did not run in the phase still take part in the gathers the others issue.
  issue_through(phase_order_.empty() ? 0 : phase_order_.size() - 1);
  for (size_t u : phase_order_)
    if (gathered_[u] && !bound_[u]) reshard(u);
  phase_ = Phase::Idle;
}

void ShardedDataParallel::end_of_backward() {
  finish_phase();
  // At rest again: every parameter sharded (a reduce-scatter already freed most; no_sync frees here).
  for (size_t u = 0; u < units_.size(); ++u) reshard(u);
  // Runs before the reducer waits for its reduce-scatters (its end-of-backward callback is queued later):
  // a joined rank may now shadow them.
  if (announced_iteration_) announce(kBackwardDone);
  announced_iteration_ = false;
}

Tensor& ShardedDataParallel::gradient_destination(size_t b) {
  DDP_CHECK(b < buckets_.size(), "ZeRO: bucket ", b, " has no gradient shard (", buckets_.size(),
            " buckets)");
  Bucket& bk = buckets_[b];
  bool holds = false;
  for (const Segment& s : segments_) holds = holds || (s.bucket == b && s.view.grad().defined());
  bk.incoming = Tensor();
  if (!holds) return bk.shard_grad;  // nothing to add to: the reduce-scatter writes the shard itself
  bk.incoming = Tensor::empty({bk.shard.shard_numel}, bk.shard_grad.dtype(), bk.shard_grad.device());
  return bk.incoming;
}

void ShardedDataParallel::accumulate_gradient_shards(const std::vector<uint8_t>& parameters_used) {
  autograd::NoGradGuard no_grad;
  for (Segment& s : segments_) {
    if (!parameters_used[s.piece.param]) continue;  // no rank used it: its .grad stays as it was
    Bucket& b = buckets_[s.bucket];
    Tensor g = b.shard_grad.slice0(s.piece.shard_offset, s.piece.shard_offset + s.piece.numel());
    if (b.incoming.defined()) {
      Tensor in = b.incoming.slice0(s.piece.shard_offset, s.piece.shard_offset + s.piece.numel());
      if (s.view.grad().defined())
        add_(g, in);
      else
        g.copy_from(in);
    }
    if (!s.view.grad().defined()) s.view.set_grad(g);
  }
  for (Bucket& b : buckets_) b.incoming = Tensor();
}

void ShardedDataParallel::on_bucket_reduce_scatter(size_t b) {
  // ZeRO-3: the unit's gradients are all in its bucket: its backward is done with the parameters.
  if (opt_.stage == 3 && buckets_[b].unit >= 0 && gathered_scopes_ == 0) reshard(static_cast<size_t>(buckets_[b].unit));
}

void ShardedDataParallel::agree_forward_order() {
  // Rank 0's observed forward order (units it did not run follow in the current order) for every rank.
  std::vector<int64_t> order;
  std::vector<uint8_t> in(units_.size(), 0);
  if (has_root_unit()) {
    order.push_back(static_cast<int64_t>(units_.size() - 1));
    in[units_.size() - 1] = 1;
  }
  for (size_t u : observed_order_)
    if (!in[u]) {
      order.push_back(static_cast<int64_t>(u));
      in[u] = 1;
    }
  for (size_t u : forward_order_)
    if (!in[u]) order.push_back(static_cast<int64_t>(u));
  Tensor t = Tensor::from_data<int64_t>(order, {static_cast<int64_t>(order.size())});
  if (gpg_->size() > 1) {
    announce(kUnitOrder);
    dist::FlightIssuer who("zero3 unit order");
    host_broadcast(*gpg_, t, 0);
  }
  std::vector<uint8_t> seen(units_.size(), 0);
  forward_order_.clear();
  for (int64_t k = 0; k < t.numel(); ++k) {
    const int64_t u = t.data<int64_t>()[k];
    DDP_CHECK(u >= 0 && u < static_cast<int64_t>(units_.size()) && !seen[static_cast<size_t>(u)], "rank ",
              pg_->rank(), ": ZeRO-3: rank 0's unit order does not fit this rank's ", units_.size(),
              " units: the ranks' models differ");
    seen[static_cast<size_t>(u)] = 1;
    forward_order_.push_back(static_cast<size_t>(u));
  }
  order_agreed_ = true;
}

void ShardedDataParallel::load_parameters(const std::map<std::string, Tensor>& by_name) {
  check_whole_parameters(by_name);  // every rank the same verdict; nothing written unless all fit
  autograd::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    wait_bucket_gather(b);
    for (const ShardSegment& s : b.shard.segments)
      b.shard_params.slice0(s.shard_offset, s.shard_offset + s.numel())
          .copy_from(by_name.at(params_[s.param].name).view({-1}).slice0(s.param_begin, s.param_end));
    if (opt_.stage == 2)  // the rest of the whole buffer too (this rank's shard is a view of it)
      for (size_t i : b.params) params_[i].tensor.copy_from(by_name.at(params_[i].name));
  }
}

void ShardedDataParallel::check_whole_parameters(const std::map<std::string, Tensor>& by_name) const {
  constexpr const char* who = "ShardedDataParallel::load_parameters";
  constexpr const char* fix =
      "pass every parameter of this model by its name, with its shape and dtype (as "
      "named_parameters() of the same model inside gathered_parameters() gives them)";
  std::map<std::string, const Tensor*> live;
  for (const auto& p : params_) live.emplace(p.name, &p.tensor);
  for (const auto& [name, t] : by_name) {
    auto it = live.find(name);
    DDP_CHECK(it != live.end(), who, ": '", name,
              "' names no parameter of this model (misspelled, or a value of another model?); ", fix);
    DDP_CHECK(t.defined(), who, ": the value of '", name, "' is an undefined tensor; ", fix);
    DDP_CHECK(t.shape() == it->second->shape(), who, ": the value of '", name, "' has shape ",
              shape_str(t.shape()), " but the parameter has ", shape_str(it->second->shape()), "; ", fix);
    DDP_CHECK(t.dtype() == it->second->dtype(), who, ": the value of '", name, "' has dtype ",
              dtype_name(t.dtype()), " but the parameter has ", dtype_name(it->second->dtype()),
              "; convert it with .to(", dtype_name(it->second->dtype()), ") first, or ", fix);
  }
  for (const auto& p : params_)
    DDP_CHECK(by_name.count(p.name), who, ": no value for parameter '", p.name, "' ",
              shape_str(p.tensor.shape()), "; ", fix);
}

std::vector<std::string> ShardedDataParallel::unit_order() const {
  std::vector<std::string> names;
  for (size_t u : forward_order_) names.push_back(units_[u].name);
  return names;
}

// ---- for the optimizer ----

void ShardedDataParallel::shard_whole_gradients() {
  autograd::NoGradGuard no_grad;
  for (Segment& s : segments_) {
    const Tensor whole = params_[s.piece.param].tensor.grad();
    if (!whole.defined()) continue;
    Tensor g = buckets_[s.bucket].shard_grad.slice0(s.piece.shard_offset, s.piece.shard_offset + s.piece.numel());
    g.copy_from(whole.view({whole.numel()}).slice0(s.piece.param_begin, s.piece.param_end));
    s.view.set_grad(g);
  }
  for (auto& p : params_) p.tensor.set_grad(Tensor());
}

bool ShardedDataParallel::parameter_used(size_t i) const {
  return ddp_->reducer().parameters_used()[i] != 0;
}

Tensor ShardedDataParallel::clip_grad_norm_tensor_(double max_norm) {
  join_step_point(/*training=*/true);  // under Join (a joined rank's shadow step made it already)
  // Over the pieces whose .grad is defined, as optim::clip_grad_norm_ over the parameters' defined .grad.
  std::vector<Tensor> grads;
  for (const Segment& s : segments_)
    if (s.view.grad().defined()) grads.push_back(s.view.grad());
  const Device device = buckets_.empty() ? Device::cpu() : buckets_.front().shard_grad.device();
  Tensor total = sum_of_squares_tensor(grads, device);  // this rank's part, shape {1} on `device`
  {
    dist::FlightIssuer who("zero clip norm");
    if (device.is_cuda() && pg_->device_memory_only()) {
      pg_->allreduce(comm_buffer_of(total), dist::ReduceOp::Sum)->wait();  // the stream waits, not the host
    } else {
      Tensor host = total.to(Device::cpu());
      host_allreduce(*pg_, host, dist::ReduceOp::Sum);
      total = host.to(device);
    }
  }
  return clip_by_sum_of_squares_(grads, total, max_norm, device);
}

double ShardedDataParallel::clip_grad_norm_(double max_norm) {
  return clip_grad_norm_tensor_(max_norm).item();
}

ShardedDataParallel::GatheredScope::GatheredScope(ShardedDataParallel& s) : s_(s) {
  if (s_.opt_.stage == 2)
    for (auto& b : s_.buckets_) s_.wait_bucket_gather(b);
  if (s_.opt_.stage != 3 || s_.gathered_scopes_++ > 0) return;
  for (size_t u : s_.forward_order_)
    if (!s_.gathered_[u]) s_.issue_gather(u, /*exact=*/true);
  for (size_t u : s_.forward_order_)
    if (!s_.bound_[u]) s_.wait_and_bind(u);
}

ShardedDataParallel::GatheredScope::~GatheredScope() {
  if (s_.opt_.stage != 3 || --s_.gathered_scopes_ > 0) return;
  for (size_t u = 0; u < s_.units_.size(); ++u) s_.reshard(u);
}

MemoryAccount ShardedDataParallel::memory_account(int64_t optimizer_state_bytes,
                                                  int optimizer_state_bytes_per_param) const {
  MemoryAccount a;
  a.stage = opt_.stage;
  a.world = pg_->size();
  for (auto& p : params_) a.num_params += p.tensor.numel();
  a.element_bytes = params_.empty() ? 4 : static_cast<int>(dtype_size(params_.front().tensor.dtype()));
  a.optimizer_bytes_per_param = optimizer_state_bytes_per_param;
  for (auto& b : buckets_) {
    a.parameter_bytes += static_cast<int64_t>(opt_.stage == 2 ? b.full.nbytes() : b.shard_params.nbytes());
    a.gradient_bytes += static_cast<int64_t>(b.shard_grad.nbytes());
  }
  for (auto& p : params_)  // whole gradients left behind (no_sync accumulation)
    if (p.tensor.grad().defined()) a.gradient_bytes += static_cast<int64_t>(p.tensor.grad().nbytes());
  a.optimizer_bytes = optimizer_state_bytes;
  a.bucket_peak_bytes = ddp_->reducer().bucket_bytes_peak();
  a.gathered_peak_bytes = gathered_peak_;
  a.resident_peak_bytes = resident_peak_bytes();
  return a;
}

}  // namespace ddp
