// join.cpp - the checks of a new Join (SyncBatchNorm, unregistered participants), the registry those checks
// read, the joined rank's loop: one activity all-reduce per iteration of the others (their forward issues
// the same one with its own flag set), the shadow of their iteration with their divisor while any rank is
// active, then the joinables' shadows, and the final model sync from the last joiner.
#include "runtime/ddp/join.h"

#include <algorithm>
#include <mutex>

#include "runtime/core/log.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/nn/sync_batchnorm.h"

namespace ddp {

namespace {

// Which process groups have a Join attached, and which participants with collectives of their own exist
// over which group (ranks may be threads of one process: keyed by the group object).
struct JoinRegistry {
  std::mutex mutex;
  std::vector<const dist::ProcessGroup*> joins;
  std::vector<std::pair<const dist::ProcessGroup*, const Joinable*>> participants;
};
JoinRegistry& registry() {
  static JoinRegistry r;
  return r;
}

// The name of the first SyncBatchNorm in the module tree ("" when there is none).
std::string first_sync_batchnorm(const nn::Module& m, const std::string& prefix) {
  for (auto& [name, child] : m.named_children()) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (dynamic_cast<const nn::SyncBatchNorm*>(child.get())) return path;
    std::string below = first_sync_batchnorm(*child, path);
    if (!below.empty()) return below;
  }
  return "";
}

}  // namespace

void register_join_participant(const dist::ProcessGroup& pg, const Joinable* participant) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().participants.emplace_back(&pg, participant);
}

void unregister_join_participant(const Joinable* participant) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  auto& v = registry().participants;
  v.erase(std::remove_if(v.begin(), v.end(), [&](auto& e) { return e.second == participant; }), v.end());
}

bool join_attached_to(const dist::ProcessGroup& pg) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  auto& v = registry().joins;
  return std::find(v.begin(), v.end(), &pg) != v.end();
}

std::vector<int32_t> join_exchange(dist::ProcessGroup& pg, JoinPoint point, bool active) {
  // Rank r's entry: 2 x point + active. Forward entries are 0/1, as the activity flags always were.
  const int world = pg.size();
  std::vector<int32_t> mine(static_cast<size_t>(world), 0);
  mine[static_cast<size_t>(pg.rank())] = 2 * static_cast<int32_t>(point) + (active ? 1 : 0);
  Tensor t = Tensor::from_data<int32_t>(mine, {world});
  {
    dist::FlightIssuer who(point == JoinPoint::Forward ? "join activity" : "join step");
    host_allreduce(pg, t, dist::ReduceOp::Sum);
  }
  std::vector<int32_t> flags(static_cast<size_t>(world));
  int forward = 0, step = 0;
  for (int r = 0; r < world; ++r) {
    const int32_t v = t.data<int32_t>()[r];
    flags[static_cast<size_t>(r)] = v % 2;
    (v / 2 == 0 ? forward : step) += 1;
  }
  DDP_CHECK(
      forward == 0 || step == 0, "rank ", pg.rank(), ": Join: the ranks are not at the same point: ", forward,
      " at a synchronized forward, ", step,
      " at an optimizer step (this rank: ", point == JoinPoint::Forward ? "forward" : "step",
      "). A joined rank shadows one step of a registered "
      "optimizer (ZeroRedundancyOptimizer, ShardedOptimizer) per synchronized backward of the ranks still "
      "training, so under Join every synchronized backward must be followed by exactly one optimizer step: "
      "two synchronized backwards before a step, or a step without a backward, cannot be shadowed. "
      "Accumulate under no_sync() for all but the last backward, or step after every backward");
  return flags;
}

Join::Join(DistributedDataParallel& ddp, JoinOptions options) : ddp_(ddp), options_(std::move(options)) {
  DDP_CHECK(!ddp_.join_enabled(), "ddp::Join: this DDP wrapper already has a Join attached");
  const int sync_bn = nn::count_sync_batchnorm(ddp_.module());
  DDP_CHECK(
      sync_bn == 0, "ddp::Join: the model has ", sync_bn,
      " SyncBatchNorm layer(s) (the first: ", first_sync_batchnorm(ddp_.module(), ""),
      "). SyncBatchNorm all-gathers the batch statistics of every rank in each training forward, and a "
      "joined rank has no batch to run that forward with, so the ranks still training would wait for it "
      "until the collective timeout. Give every rank the same number of batches (the DistributedSampler "
      "pads the shards to equal length), or use BatchNorm2d, whose buffers Join broadcasts from a rank "
      "still training.");
  const dist::ProcessGroup* pg = &ddp_.process_group();
  for (Joinable* j : options_.joinables)
    DDP_CHECK(j != nullptr, "ddp::Join: JoinOptions::joinables holds a null");
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    for (auto& [group, participant] : registry().participants) {
      const bool registered = std::find(options_.joinables.begin(), options_.joinables.end(), participant) !=
                              options_.joinables.end();
      DDP_CHECK(
          group != pg || registered, "ddp::Join: a ", participant->joinable_name(),
          " over this DDP wrapper's process group is not in JoinOptions::joinables. Its step issues "
          "collectives that a joined rank must shadow, or the ranks still training wait for it until the "
          "collective timeout: build the Join as ddp::Join join(ddp, {.joinables = {&optimizer}})");
    }
    registry().joins.push_back(pg);
  }
  ddp_.enable_join(options_.divide_by_initial_world_size);
  for (Joinable* j : options_.joinables) j->set_joined_to(true);
}

Join::~Join() {
  for (Joinable* j : options_.joinables) j->set_joined_to(false);
  ddp_.disable_join();
  std::lock_guard<std::mutex> lock(registry().mutex);
  auto& v = registry().joins;
  auto it = std::find(v.begin(), v.end(), &ddp_.process_group());
  if (it != v.end()) v.erase(it);
}

void Join::join() {
  const int world = ddp_.process_group().size();
  // The flight recorder's iteration of what this rank issues from here on: the others' iteration it shadows
  // (the reducer numbers them as the training loop numbers its own), not this rank's last one - only when the
  // program numbers its iterations at all.
  const bool numbered = dist::flight_iteration() >= 0;
  for (;;) {
    if (numbered) dist::set_flight_iteration(ddp_.reducer().next_iteration_number());
    // What the others communicate between their synchronized iterations (ZeRO-3: the gathers of no_sync
    // micro-steps and of forwards without grad), until their next synchronized forward or all have joined.
    for (Joinable* j : options_.joinables) j->join_shadow_between_iterations();
    std::vector<int32_t> active = ddp_.exchange_activity(false);
    int root = -1, count = 0;
    for (int r = 0; r < world; ++r)
      if (active[static_cast<size_t>(r)]) {
        root = r;
        ++count;
      }
    if (root < 0) break;  // nobody is training any more
    last_joiner_ = false;
    // The divisor the active ranks' forward just set: on shm it also picks their all-reduce (Avg when it is
    // the world size, else Sum), so a stale one here would be a collective mismatch.
    ddp_.reducer().set_divide_factor(options_.divide_by_initial_world_size ? world : count);
    for (Tensor& p : ddp_.module().parameters()) {  // the others' zero_grad (their write-back fills the rest)
      if (options_.zero_grad_set_to_none)
        p.set_grad(Tensor());
      else if (p.grad().defined())
        p.grad().zero_();
    }
    for (Joinable* j : options_.joinables) j->join_zero_grad(options_.zero_grad_set_to_none);
    // The others' order: buffers broadcast before their forward, their forward's and backward's collectives
    // on groups of their own (ZeRO-3's gathers), their backward, their step.
    ddp_.shadow_buffers(root);
    for (Joinable* j : options_.joinables) j->join_shadow_before_backward();
    ddp_.shadow_backward();
    for (Joinable* j : options_.joinables) j->join_shadow_iteration();
    ++shadowed_;
    if (shadowed_ == 1000)
      DDP_LOG(
          Warn, "rank ", ddp_.process_group().rank(),
          ": DDP Join has shadowed 1000 iterations of other ranks: the input is very uneven across ranks");
  }
  if (numbered)
    dist::set_flight_iteration(ddp_.reducer().next_iteration_number() - 1);  // the last one trained
  ddp_.sync_final_model(last_joiner_);
}

}  // namespace ddp
