// reducer.h - the gradient bucketer at the heart of DDP. It listens to every parameter's post-accumulate
// hook; each ready gradient is in (an op wrote it there: the slot was its gradient destination) or is copied
// into its slot of a flat bucket buffer (allocated through the process
// group: shared memory on shm) and divided by the world size in the same pass (or, on such memory, by the
// all-reduce itself); a bucket whose last gradient arrived is launched as one all-reduce, strictly in
// bucket-index order on every rank, while backward keeps running; an end-of-backward callback waits for the
// buckets and writes the averaged gradients back. See docs/ddp-step.md for the whole flow and why each rule
// exists.
//
// This is the only place where autograd and dist meet. It never blocks the host on CUDA (the comm stream
// waits on events of the compute stream and vice versa); on CPU the all-reduces run on the process group's
// thread while the main thread continues backward.
//
// When ranks disagree (docs/ddp-step.md, "When ranks disagree") every rank still issues the same collectives:
// a rank with missing gradients all-reduces zeros for them and raises afterwards; the one-time bucket
// rebuild happens only after an iteration that every rank agrees succeeded (a one-int all-reduce, issued only
// until the rebuild happened), with rank 0's whole bucket layout broadcast; a backward that died midway is
// waited for before its buffers are reused; and a rank that ran out of data shadows the others' iterations
// with zeros (shadow_backward, for Join).
//
// ZeRO-2/3 (runtime/ddp/sharded/, docs/sharding.md) use this same reducer with a sharding comm hook
// (CommHook::result_is_sharded): the buckets are padded so they split into equal shards (bucket_pad_multiple),
// may be given as units (ReducerOptions::layout), live for one backward only, and are reduce-scattered into
// each rank's gradient shard instead of all-reduced; .grad is left none.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/ddp/comm_hook.h"
#include "runtime/ddp/iteration_stats.h"
#include "runtime/ddp/reducer_advice.h"
#include "runtime/ddp/step_timing.h"
#include "runtime/distributed/process_group.h"
#include "runtime/nn/module.h"

namespace ddp {


struct ReducerOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  // false: no all-reduce starts before backward finished (for measuring what overlap buys).
  bool overlap = true;
  // Rebuild the buckets once, after the first iteration that succeeded on every rank, from the order
  // gradients really became ready (parameters without a gradient in that iteration keep their place of the
  // default order).
  bool rebuild_buckets = true;
  // What each bucket's communication does (comm_hook.h); null: AllreduceHook.
  std::shared_ptr<CommHook> comm_hook;
  // The graph is the same every iteration (the same parameters used, each by the same number of gradient
  // hooks). Iteration 1 only counts hook firings per parameter and reduces everything at the end of backward
  // (with the used-map all-reduce, once); from iteration 2: no reachability search, never-used parameters
  // known, a parameter is ready when its count is reached (so one used by several backwards - nested, as
  // activation checkpointing runs - works). Makes find_unused_parameters redundant. See docs/extensions.md.
  // If the graph changes after all (a hook fires more often than in iteration 1, or less), the backward still
  // issues every collective and its end raises on the ranks where it changed; the ranks stay in step
  // (docs/ddp-step.md, "static_graph").
  bool static_graph = false;
  // How the errors (unused parameters, a changed static graph) tell the user what to change and name the
  // iteration; the defaults speak to C++ users of DistributedDataParallel (reducer_advice.h).
  ReducerAdvice advice;
  // Explain this synchronized iteration (its number as in the errors; train: its step): afterwards rank 0
  // prints a plain-language account of it on every rank (step_explain.h, docs/trace.md "Explain"). Every rank
  // takes part (a clock sync and an all-gather, that iteration only); rank 0's number holds for all (it goes
  // with the bucket layout broadcast). 0: the number in the environment variable DDP_EXPLAIN, or never.
  int64_t explain_iteration = 0;

  // ---- sharding (runtime/ddp/sharded/, docs/sharding.md) ----
  // The buckets as lists of parameter indices in launch order (each parameter exactly once); empty: the
  // reducer's own layout by bucket_cap_mb. ZeRO-3 passes one bucket per unit. A given layout is never rebuilt.
  std::vector<std::vector<size_t>> layout;
  // Every bucket's buffer is padded with zeros to a multiple of this many elements, so that each rank's
  // shard of it has the same length (ZeRO-2/3 reduce-scatter the buckets).
  int64_t bucket_pad_multiple = 1;
};

class Reducer {
 public:
  Reducer(std::vector<nn::NamedTensor> params, std::shared_ptr<dist::ProcessGroup> pg,
          ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called after each forward that will be followed by a synchronized backward. With find_unused_parameters,
  // finds the parameters unreachable from `outputs`; they are marked ready when backward starts.
  void prepare_for_backward(const std::vector<Tensor>& outputs);
  // false inside no_sync(): hooks leave gradients to accumulate locally.
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  // What gradients are divided by before the sum-all-reduce: the world size (default), or, for Join with
  // divide_by_initial_world_size = false, the number of ranks still training in this iteration.
  void set_divide_factor(int ranks);

  // Join: this rank has no batch for the others' current synchronized iteration. Issues exactly the
  // collectives their backward issues (static_graph's first used-map when this rank ran no backward yet,
  // every bucket all-reduced as zeros, the used-map with nothing used, the rebuild agreement), with the
  // divisor they use (set_divide_factor, by Join). .grad then holds their averaged gradients, as after a
  // backward of this rank (a ZeroRedundancyOptimizer under Join steps its shard with them).
  void shadow_backward();

  // The statistics of the last synchronized iteration; the number of such iterations so far.
  // The last synchronized iteration's statistics. On the device clock (CUDA parameters on NCCL, see
  // iteration_stats.h) the first read after an iteration waits for that iteration's events.
  const IterationStats& last_stats() const;
  int64_t iterations() const { return iteration_; }
  // The number the errors give the next synchronized iteration (backward, or Join shadow of one); later
  // ones count on from it, failed ones included. By default the first is 1 - the "iteration 1" of
  // static_graph's errors; a program that resumes at step S calls this with S + 1 so the errors name the
  // steps of its log.
  void number_iterations_from(int64_t next);
  // That number: the iteration the next synchronized backward (or a Join shadow of one) belongs to.
  int64_t next_iteration_number() const { return first_iteration_number_ + synchronized_iterations_; }
  // Parameter indices of each bucket, in launch order.
  std::vector<std::vector<size_t>> bucket_layout() const;
  // "bucket 0: 3 params, 1.2 MB: fc3.bias, fc3.weight, ..." one line per bucket.
  std::string describe_buckets() const;
  bool buckets_rebuilt() const { return rebuilt_; }
  CommHook& comm_hook() { return *opt_.comm_hook; }
  // Elements of bucket b's buffer, padding included (bucket_pad_multiple).
  int64_t bucket_numel(size_t b) const { return buckets_[b].numel; }
  // Element offset of parameter i's slot in its bucket, and the bucket.
  int64_t slot_offset(size_t i) const { return slots_[i].offset; }
  size_t bucket_of(size_t i) const { return slots_[i].bucket; }
  // Per parameter: whether any rank gave it a gradient in the last synchronized iteration (find_unused's
  // used-map; static_graph's iteration-1 record; otherwise every parameter). A sharding hook's optimizer
  // skips the others, as optimizers skip a .grad that stayed none.
  const std::vector<uint8_t>& parameters_used() const { return used_last_; }
  // A sharding hook (CommHook::result_is_sharded): bucket buffers live for one backward only; their bytes
  // now and at most so far (the memory account's communication buffers).
  int64_t bucket_bytes_live() const { return bucket_bytes_live_; }
  int64_t bucket_bytes_peak() const { return bucket_bytes_peak_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // element offset of each param's slot in buffer
    Tensor buffer;                 // flat, all slots back to back (then padding); sharded: while in use only
    int64_t numel = 0;             // of buffer, padding included
    // The first buffer came from ProcessGroup::allocate_comm_buffer (shm: shared memory). Decides
    // folds_division, so every rank decides the same whichever of its two buffers it uses.
    bool in_comm_memory = false;
    // Default mode (not gradient_as_bucket_view, not sharded): the write-back makes .grad a view of `buffer`
    // through a storage lent to the caller (`lent`: alive while any tensor on it is), and the next iteration
    // uses whichever of `buffer` and `spare` nothing lent is alive on (choose_buffer). See docs/ddp-step.md,
    // "write-back".
    Tensor spare;
    std::weak_ptr<Storage> lent, spare_lent;
    bool chosen = false;  // this iteration's buffer is chosen (reset_iteration clears it)
    size_t pending = 0;
    std::shared_ptr<dist::Work> work;
    BucketTiming timing;
    std::chrono::steady_clock::time_point launched_at, completed_at;
    std::string flight_params;  // "first .. last" parameter name, for the flight recorder's entries
  };
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;
  };

  // Buckets as lists of parameter indices, in launch order.
  using Layout = std::vector<std::vector<size_t>>;
  Layout layout_for(const std::vector<size_t>& order) const;
  // Every rank adopts rank 0's layout (a broadcast), after checking it fits this rank's parameters.
  Layout layout_of_rank0(const Layout& mine);
  void build_buckets(const Layout& layout);
  void on_gradient_ready(size_t index);
  // Whether an op may write this parameter's next gradient straight into its bucket slot (grad_destination).
  bool offers_destination(size_t index) const;
  void begin_backward();
  // `observed`: the parameter's own hook fired (it counts for the ready order of the rebuild).
  void mark_ready(size_t index, bool observed);
  void launch_ready_buckets();
  void launch(Bucket& b);
  // True when the bucket's all-reduce divides (ReduceOp::Avg) instead of the copy-in: the default hook, a
  // buffer in the backend's communication memory, and the divisor is the world size.
  bool folds_division(const Bucket& b) const;
  void finalize();
  void finish_communication();
  void write_back();
  void wait_for_outstanding_work();
  void reset_iteration();
  void maybe_rebuild(bool this_rank_ok);
  void rebuild_from_ready_order();
  // `number`: the iteration's number in the errors (number_iterations_from).
  [[noreturn]] void raise_unready(const std::vector<size_t>& unready, const std::string& comm_error,
                                  int64_t number);
  // "iteration 3", in the caller's word for an iteration (ReducerOptions::advice).
  std::string iteration_name(int64_t number) const;
  // ---- static_graph (reducer_static_graph.cpp) ----
  void static_graph_on_hook(size_t index);
  void static_graph_end_of_first_backward();
  // After the write-back of a backward whose graph changed: a parameter no rank used in iteration 1 that got
  // a gradient here gets grad none again, as on the ranks where it stayed unused.
  void static_graph_drop_unannounced(const std::vector<size_t>& changed);
  [[noreturn]] void raise_graph_changed(const std::vector<size_t>& unready,
                                        const std::vector<size_t>& changed, const std::string& comm_error);
  Tensor slot_view(size_t index);
  // The bucket's buffer; with a sharding hook allocated (zeros) on first use in an iteration; in the default
  // mode chosen on first use in an iteration (choose_buffer).
  Tensor& buffer_of(Bucket& b);
  // Default mode: keeps `buffer` unless the caller still holds a gradient lent from it, else takes `spare`
  // (the write-back lends only while the other buffer is free, so one of them is).
  void choose_buffer(Bucket& b);
  // The whole of b.buffer on a new storage lent to the caller (b.lent), which keeps the buffer alive.
  static Tensor lend(Bucket& b);
  // Sharding hook: drops the buffers of buckets whose communication finished (all: wait first).
  void release_finished_buffers(bool all);
  double since_forward() const;
  // ---- explain (reducer_explain.cpp) ----
  // After iteration `number` (every rank, on the error path too): if it is the one to explain, gathers every
  // rank's records and rank 0 prints the account. `shadow`: this rank's Join shadow of the iteration.
  void maybe_explain(int64_t number, bool shadow, double backward_compute_s, double exposed_s);
  void begin_timing();  // the step clock of this iteration (host, or CUDA events on NCCL)

  std::vector<nn::NamedTensor> params_;
  const char* bucket_issuer_ = "ddp bucket";  // the flight recorder's tag of bucket collectives ("join shadow")
  std::shared_ptr<dist::ProcessGroup> pg_;
  ReducerOptions opt_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
  std::unordered_map<const TensorImpl*, size_t> index_of_;  // parameter -> index (reachability lookups)
  bool sync_ = true;
  bool rebuilt_ = false;
  bool default_hook_ = false;  // opt_.comm_hook is the plain AllreduceHook
  bool sharded_ = false;       // opt_.comm_hook->result_is_sharded(): buckets are transient, .grad none
  std::vector<uint8_t> used_last_;
  int64_t bucket_bytes_live_ = 0, bucket_bytes_peak_ = 0;

  // ---- per-iteration state ----
  bool backward_started_ = false;
  bool expect_unused_marking_ = false;
  std::vector<uint8_t> ready_;
  std::vector<uint8_t> reachable_;     // from prepare_for_backward (find_unused_parameters)
  std::vector<int32_t> locally_used_;  // used in this or an accumulated (no_sync) backward
  Tensor used_map_;                    // int32 all-reduced with the last bucket
  std::shared_ptr<dist::Work> used_map_work_;
  size_t next_to_launch_ = 0;
  std::vector<size_t> ready_order_;  // until the rebuild: the order hooks fired in this iteration
  int divide_factor_ = 1;            // set_divide_factor; the world size unless Join says otherwise
  std::chrono::steady_clock::time_point forward_end_;
  size_t unused_marked_ = 0;
  size_t gradients_copied_ = 0;
  size_t gradients_scaled_ = 0;
  size_t gradients_cloned_ = 0;  // write_back: .grad given a tensor of its own (IterationStats)
  double unused_search_s_ = 0;

  size_t searches_ = 0;
  // explain: the iteration number to explain (0: none); armed during it, with each parameter's ready time
  // (seconds since forward end, -1 before it is ready).
  int64_t explain_number_ = 0;
  bool explain_armed_ = false;
  std::vector<double> explain_ready_s_;

  // ---- static_graph ----
  std::vector<int32_t> static_expected_hooks_;  // per parameter: hook firings per backward (iteration 1)
  std::vector<int32_t> static_pending_hooks_;   // this iteration: firings still to come
  std::vector<uint8_t> static_unused_;          // no rank used it in iteration 1: grad stays none
  std::vector<size_t> static_changed_;  // this iteration: hooks that fired after their parameter was ready

  int64_t iteration_ = 0;
  // Numbering for the errors: synchronized iterations so far (failed ones and Join shadows included), the
  // number of the first one, and static_graph's iteration that learned the graph.
  int64_t synchronized_iterations_ = 0;
  int64_t first_iteration_number_ = 1;
  int64_t static_recorded_number_ = 1;
  mutable IterationStats last_stats_;
  // The measurements of the running iteration and of the last finished one (read lazily by last_stats()).
  std::unique_ptr<StepTiming> timing_ = std::make_unique<StepTiming>();
  mutable std::unique_ptr<StepTiming> last_timing_ = std::make_unique<StepTiming>();
  mutable bool last_stats_pending_ = false;
};

}  // namespace ddp
