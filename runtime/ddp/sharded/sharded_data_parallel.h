// sharded_data_parallel.h - ZeRO-2 and ZeRO-3 (fully sharded data parallelism) on DDP's bucketer.
//
// The same Reducer as plain DDP fills the same buckets while backward runs; a ReduceScatterHook reduces each
// bucket by reduce-scatter instead of all-reduce, so a rank ends the backward with only ITS shard of every
// averaged gradient (shard_layout.h: buckets padded so all shards have one length). A ShardedOptimizer
// (sharded_optimizer.h) then steps this rank's shard of the parameters with its shard of the optimizer state.
//
//   ZeRO-2: parameters stay whole on every rank, laid out as the buckets are (one flat buffer per bucket,
//   each
//           parameter a view of it). After the step every rank's updated shard is all-gathered back into the
//           buffers; each module's forward pre-hook waits for the gathers holding its own parameters, so the
//           gathers overlap the next forward.
//   ZeRO-3: parameters live sharded at rest: a parameter tensor has no memory outside its unit's forward and
//           backward. A unit is a module (default: each item of a Sequential or ModuleList that holds
//           parameters - a GPT block, an MLP layer) and is one bucket of the reducer, so its reduce-scatter
//           starts as soon as its backward is done. Its parameters are all-gathered before its forward
//           (pre-hook), freed after it (reshard_after_forward), gathered again when backward reaches its
//           output (an identity node on that output), and freed once its bucket is handed to the
//           reduce-scatter. Parameters of no unit form the root unit, gathered for the whole forward and
//           backward.
//
// Every rank issues the same all-gathers in the same order whatever its graph does: gathers are issued only
// as a prefix of an agreed unit order (the registration order in iteration 1, then the forward order rank 0
// observed in it; backward: the reverse), each unit once per phase; a unit's hook that finds it not yet
// issued issues everything before it first, and the end of each forward and backward issues (and drops) the
// units this rank did not run. `prefetch` gathers run ahead of the unit in use. docs/sharding.md walks a
// step.
//
//   ShardedDataParallel sdp(model, pg, {.stage = 3, .gather_group = pg2});
//   ShardedOptimizer opt(sdp, [](auto p) { return std::make_unique<optim::AdamW>(p, AdamWOptions{}); });
//   Tensor loss = ops::cross_entropy(sdp.forward(x), y);
//   autograd::backward(loss);       // buckets reduce-scattered while this runs; .grad stays none
//   opt.step();                     // this rank's shard; ZeRO-2 then starts the parameter gathers
//   opt.zero_grad();                // the gradient shard, as a plain optimizer's zero_grad clears .grad
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/joinable.h"
#include "runtime/ddp/sharded/memory_account.h"
#include "runtime/ddp/sharded/shard_layout.h"

namespace ddp {

class ReduceScatterHook;

struct ShardOptions {
  int stage = 2;  // 2: gradients and optimizer state sharded; 3: parameters too
  // Buckets, find_unused_parameters, static_graph, broadcast_buffers... as for DDP. Refused: a comm_hook
  // (the buckets' communication IS the reduce-scatter) and gradient_as_bucket_view (no whole gradient).
  DDPOptions ddp;
  // The group that carries the parameter all-gathers; null: the main group. A second group keeps the gathers
  // in their own order, independent of the reduce-scatters, whatever each rank's graph does: ZeRO-3 at
  // world > 1 requires one (asked for at construction); ZeRO-2 may use one.
  std::shared_ptr<dist::ProcessGroup> gather_group;
  // ZeRO-3: how many units' gathers run ahead of the one about to compute (forward and backward); 0: each
  // unit is gathered when its hook runs (nothing overlaps the gather). ZeRO-2 issues all its gathers at the
  // step (its parameters are whole anyway; only the waiting is per module).
  int prefetch = 1;
  // ZeRO-3: free a unit's gathered parameters after its forward and gather them again for its backward
  // (memory: one unit plus the prefetched ones at a time); false: keep them from forward to backward.
  bool reshard_after_forward = true;
  // ZeRO-2: each module waits for its own parameters' gather (forward pre-hooks); false: the whole forward
  // waits first. A module called as child->forward(x) skips its hook: keep this false for such models.
  bool overlap_param_gather = true;
  // ZeRO-3: all-gather the parameters in bfloat16 (half the bytes) and widen them to the parameters' dtype
  // on arrival; the shards (the master weights), the optimizer and the gradient reduce-scatter stay in the
  // parameters' dtype (float32). Every rank then computes with the same bf16-rounded parameters - what a bf16
  // mixed-precision forward (train --dtype bfloat16) rounds the linear weights to anyway. gathered_parameters()
  // always gathers exactly. Refused for ZeRO-2 (its parameters stay whole: a rank's own shard would stay
  // exact while the others' arrived rounded).
  bool gather_bf16 = false;
  // ZeRO-3 units by module name ("blocks.0"); empty: the default above. Refused: a name that is no module,
  // a module without parameters (or only ones an earlier unit took), one inside another listed unit (units
  // do not nest). ZeRO-2 ignores it (as prefetch).
  std::vector<std::string> units;
};

class ShardedDataParallel : public Joinable {
 public:
  ShardedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<dist::ProcessGroup> pg,
                      ShardOptions options = {});
  ~ShardedDataParallel() override;
  ShardedDataParallel(const ShardedDataParallel&) = delete;
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  // The module's forward between before_forward() and after_forward({y}).
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  // For custom loops: module(x) between the two; use the outputs after_forward returns (ZeRO-3 hangs the
  // start of its backward on them).
  void before_forward();
  std::vector<Tensor> after_forward(const std::vector<Tensor>& outputs);
  [[nodiscard]] DistributedDataParallel::NoSyncGuard no_sync() { return ddp_->no_sync(); }

  // ---- for the optimizer (sharded_optimizer.h) ----
  struct Bucket {
    std::vector<size_t> params;  // the reducer's bucket, slot order
    BucketShard shard;           // this rank's part of it
    Tensor full;                 // the whole bucket of parameters: ZeRO-2 always, ZeRO-3 while gathered
    Tensor low;                  // ZeRO-3 with gather_bf16: the bfloat16 gather in flight, widened into full
    Tensor shard_params;         // this rank's shard of the parameters (ZeRO-2: a view of full)
    Tensor shard_grad;  // this rank's shard of the averaged gradient (see Segment for which parts hold one)
    Tensor incoming;    // the reduce-scatter's result while shard_grad already holds gradients to add to
    std::shared_ptr<dist::Work> gather;  // the all-gather in flight into full, if any
    std::chrono::steady_clock::time_point gather_issued;  // for the trace
    int unit = -1;               // ZeRO-3: the unit it belongs to
  };
  int stage() const { return opt_.stage; }
  const std::vector<nn::NamedTensor>& parameters() const { return params_; }
  std::vector<Bucket>& buckets() { return buckets_; }
  // This rank's pieces of the parameters, one per parameter with elements in its shard (shard_layout.h):
  // `view` is the piece of shard_params, named "fc1.weight[128:208]"; its .grad is the sharded .grad - none
  // until a synchronized backward gives the parameter a gradient, then the matching view of shard_grad, into
  // which every later synchronized backward ADDS (as into .grad) until zero_grad: the optimizer's zero_grad
  // (ShardedOptimizer's parameters are these views) sets it to none or zeroes it in place. A parameter no
  // rank used keeps its .grad as it was, as in plain DDP.
  struct Segment {
    size_t bucket;
    ShardSegment piece;
    Tensor view;
  };
  const std::vector<Segment>& segments() const { return segments_; }
  // Whether any rank gave parameter i a gradient in the last synchronized backward (else: skip it).
  bool parameter_used(size_t i) const;
  // The deterministic mode (deterministic_reduction.h): every rank holds the same whole averaged gradient in
  // each parameter's .grad (no_sync backwards, then the exact mean); this copies this rank's pieces of it into
  // the gradient shards the optimizer steps (a parameter with .grad none keeps its sharded .grad as it was)
  // and frees the whole .grad. No communication.
  void shard_whole_gradients();
  // ZeRO-2: starts the all-gathers of every bucket (after the optimizer updated this rank's shards).
  void after_step();
  // The global L2 norm of the averaged gradient (all shards: one all-reduce), clipped to max_norm like
  // optim::clip_grad_norm_; returns the norm before clipping. Collective. On CUDA with a device group (NCCL)
  // the local sum of squares, its all-reduce, the norm and the scale all stay on the device; the tensor
  // variant returns the norm as a float64 scalar tensor there without reading it (the double one reads it).
  double clip_grad_norm_(double max_norm);
  Tensor clip_grad_norm_tensor_(double max_norm);

  // ---- whole parameters outside the wrapper's forward ----
  // ZeRO-3: gathers every parameter for the scope (evaluation, checkpoints, comparing): collective. ZeRO-2:
  // waits for the gathers a step started.
  class GatheredScope {
   public:
    explicit GatheredScope(ShardedDataParallel& s);
    ~GatheredScope();
    GatheredScope(const GatheredScope&) = delete;
    GatheredScope& operator=(const GatheredScope&) = delete;

   private:
    ShardedDataParallel& s_;
  };
  [[nodiscard]] GatheredScope gathered_parameters() { return GatheredScope(*this); }
  // Sets every parameter to the given whole values (by name, e.g. from a consolidated checkpoint at any world
  // size): ZeRO-2 writes the whole buffers, ZeRO-3 this rank's shards. Every rank passes the same values. The
  // whole input is checked first (every parameter present, none unknown, each with its shape and dtype), so
  // every rank refuses the same input with the same message and a refused load writes nothing.
  void load_parameters(const std::map<std::string, Tensor>& by_name);
  // Unit names in the agreed forward order (the root unit is "(root)").
  std::vector<std::string> unit_order() const;

  // Per-rank memory (memory_account.h): what this rank holds now, and the peaks so far.
  MemoryAccount memory_account(int64_t optimizer_state_bytes, int optimizer_state_bytes_per_param) const;

  // Joinable: a joined rank shadows the others' gathers (ZeRO-3); ZeRO-2 has none. Under Join, ZeRO-3's
  // ranks announce every collective they issue on the gather group (an all-reduce of one int64 there before
  // it: which unit's gather, the unit-order agreement, the start of a synchronized iteration, the end of its
  // backward's gathers), because only they know how many gathers a step makes (no_sync micro-steps, a unit
  // run twice, forwards without grad); a joined rank serves the announcements: it issues the same gather.
  void join_shadow_between_iterations() override;  // until their next synchronized forward (or all joined)
  void join_shadow_before_backward() override;     // until the end of their backward's gathers
  void join_shadow_iteration() override;
  // Under Join, once per step (the optimizer's, or the clipping before it, whichever comes first): the step's
  // Join exchange on the main group (join_exchange), after - ZeRO-3 - its announcement on the gather group.
  // `training`: this rank steps its own iteration; false: a joined rank's shadow of the others' step.
  void join_step_point(bool training);
  void set_joined_to(bool attached) override;
  std::string joinable_name() const override { return "ShardedDataParallel"; }

  DistributedDataParallel& ddp() { return *ddp_; }
  Reducer& reducer() { return ddp_->reducer(); }
  dist::ProcessGroup& process_group() { return *pg_; }
  dist::ProcessGroup& gather_group() { return *gpg_; }
  nn::Module& module() { return *module_; }
  // Statistics: gathers issued, and how long the forward/backward waited for them in total.
  int64_t gathers_issued() const { return gathers_issued_; }
  double gather_wait_s() const { return gather_wait_s_; }
  void reset_gather_stats() {
    gathers_issued_ = 0;
    gather_wait_s_ = 0;
  }

  // Called by the ReduceScatterHook when bucket b's reduce-scatter starts (ZeRO-3: its unit is done).
  void on_bucket_reduce_scatter(size_t b);
  // For the ReduceScatterHook: where bucket b's reduce-scatter writes - shard_grad itself while no piece of
  // it holds a gradient, else `incoming`; and, once every bucket is done, the add into the shards.
  Tensor& gradient_destination(size_t b);
  void accumulate_gradient_shards(const std::vector<uint8_t>& parameters_used);

 private:
  struct Unit {
    std::string name;                       // module name, "(root)" for the rest
    nn::Module* module = nullptr;           // null for the root unit
    size_t bucket = 0;
  };
  enum class Phase { Idle, Forward, Backward };

  std::vector<std::vector<size_t>> choose_units();  // ZeRO-3: parameter indices per unit (root last)
  [[noreturn]] void refuse_unit(const std::string& name) const;  // a units name no module unit took
  // ZeRO-3: some parameters belong to no module unit; they form the root unit, the last of units_.
  bool has_root_unit() const { return !units_.empty() && !units_.back().module; }
  void build_buckets();
  void check_whole_parameters(const std::map<std::string, Tensor>& by_name) const;  // load_parameters
  void install_zero2_hooks();
  void install_zero3_hooks();
  // Issues all-gathers of the agreed order up to position `through` of the phase's order (inclusive).
  void issue_through(size_t through);
  // exact: in the parameters' dtype even with gather_bf16 (gathered_parameters()).
  void issue_gather(size_t unit, bool exact = false);
  // Waits for the unit's gather and points its parameters at the gathered memory.
  void wait_and_bind(size_t unit);
  void reshard(size_t unit);           // drops the gathered memory; parameters have none
  void unit_needed(size_t unit);       // a unit's hook: gathered (and bound) when this returns
  void begin_phase(Phase p);
  void finish_phase();                 // issues and drops what this rank did not use in the phase
  void end_of_backward();
  void agree_forward_order();          // after the first forward: rank 0's observed order for everyone
  void wait_bucket_gather(Bucket& b);  // ZeRO-2
  // ZeRO-3 under Join (see join_shadow_between_iterations): a rank still training announces; a joined rank
  // serves the announcements until `until` (or every rank joined) and returns what ended it.
  bool announcing() const;
  void announce(int64_t code);
  int64_t serve_announcements(int64_t until);
  void record_gathered_bytes();

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<dist::ProcessGroup> pg_, gpg_;
  ShardOptions opt_;
  std::shared_ptr<ReduceScatterHook> hook_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::vector<nn::NamedTensor> params_;
  std::vector<Bucket> buckets_;
  std::vector<Segment> segments_;  // bucket by bucket, in shard order
  bool under_join_ = false;
  bool shadowing_ = false;  // serving announcements: issue, do not announce
  bool announced_iteration_ =
      false;                      // this forward announced a synchronized iteration: its backward's end too
  bool step_point_done_ = false;  // join_step_point ran for the coming step

  // ---- ZeRO-3 ----
  std::vector<Unit> units_;                   // registration order; the root unit (if any) last
  std::vector<size_t> forward_order_;         // agreed unit order of a forward (backward: reversed)
  bool order_agreed_ = false;
  std::vector<size_t> observed_order_;        // this forward's first calls, in order
  std::vector<uint8_t> observed_;
  Phase phase_ = Phase::Idle;
  std::vector<size_t> phase_order_;           // forward_order_ or its reverse
  std::vector<size_t> position_;              // unit -> position in phase_order_
  size_t issued_ = 0;                         // phase_order_[0, issued_) issued in this phase
  std::vector<uint8_t> gathered_;             // unit's full buffer present (issued or done)
  std::vector<uint8_t> bound_;                // unit's parameters point at it
  int64_t gathered_bytes_ = 0, gathered_peak_ = 0;
  int64_t gathers_issued_ = 0;
  double gather_wait_s_ = 0;
  int gathered_scopes_ = 0;
};

}  // namespace ddp
