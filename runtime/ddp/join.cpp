// join.cpp - the joined rank's loop: one activity all-reduce per iteration of the others (their forward
// issues the same one with its own flag set), the shadow of their iteration while any rank is active, and
// the final model sync from the last joiner.
#include "runtime/ddp/join.h"

#include "runtime/core/log.h"

namespace ddp {

Join::Join(DistributedDataParallel& ddp, JoinOptions options) : ddp_(ddp) {
  DDP_CHECK(!ddp_.join_enabled(), "ddp::Join: this DDP wrapper already has a Join attached");
  ddp_.enable_join(options.divide_by_initial_world_size);
}

Join::~Join() { ddp_.disable_join(); }

void Join::join() {
  const int world = ddp_.process_group().size();
  for (;;) {
    std::vector<int32_t> active = ddp_.exchange_activity(false);
    int root = -1;
    for (int r = 0; r < world; ++r)
      if (active[static_cast<size_t>(r)]) root = r;
    if (root < 0) break;  // nobody is training any more
    last_joiner_ = false;
    ddp_.shadow_iteration(root);
    ++shadowed_;
    if (shadowed_ == 1000)
      DDP_LOG(
          Warn, "rank ", ddp_.process_group().rank(),
          ": DDP Join has shadowed 1000 iterations of other ranks: the input is very uneven across ranks");
  }
  ddp_.sync_final_model(last_joiner_);
}

}  // namespace ddp
