// join.cpp - the checks of a new Join (SyncBatchNorm, unregistered participants), the registry those checks
// read, the joined rank's loop: one activity all-reduce per iteration of the others (their forward issues
// the same one with its own flag set), the shadow of their iteration with their divisor while any rank is
// active, then the joinables' shadows, and the final model sync from the last joiner.
#include "runtime/ddp/join.h"

#include "runtime/distributed/flight_recorder.h"

#include <algorithm>
#include <mutex>

#include "runtime/core/log.h"
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
    // The others' order: buffers broadcast before their forward, their forward's and backward's collectives on
    // groups of their own (ZeRO-3's gathers), their backward, their step.
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
