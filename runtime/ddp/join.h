// join.h - uneven inputs: PyTorch's Join / DDP.join(). Ranks whose data shards differ in length would issue
// different collectives once the shortest runs out (and fail with a "collective mismatch" error). With a Join
// attached, every synchronized forward first tells the others that this rank is still training; a rank that
// ran out of batches calls join(), which shadows the others' iterations - an all-reduce of zeros for every
// gradient bucket, the used-map (static_graph's first one too), the buffer broadcast, then each registered
// joinable's step (ZeRO's broadcasts) - until every rank has joined, and then gives every rank the
// parameters and buffers of the last rank to join.
//
//   ddp::Join join(ddp, {.joinables = {&zero}});  // before the first forward, on every rank (zero: optional)
//   while (auto batch = loader.next()) { loss = f(ddp.forward(x)); backward(loss); zero.step(); ... }
//   join.join();                                  // every rank, once its data is done
//
// Gradients are divided by the initial world size (joined ranks add zeros), as PyTorch does by default; with
// divide_by_initial_world_size = false by the number of ranks still training (a joined rank sets the same
// divisor, so its collectives match theirs). A joined rank's .grad receives the averaged gradients of each
// shadowed iteration, so a ZeroRedundancyOptimizer registered here steps its shard with them (at the learning
// rate of the ranks still training) and the result equals the unsharded optimizer's. Only synchronized
// iterations are announced: forwards inside no_sync() and forwards without grad (evaluation) communicate
// nothing, so they need no shadow; each announced iteration must be followed by one step of every joinable.
// Any other collective an active rank issues between join points (a logged metric, an evaluation all-reduce)
// has no shadow: keep those to points every rank reaches (docs/ddp-step.md, Join).
//
// Refused at construction, with the reason, on every rank: a model with SyncBatchNorm (its forward's
// all-gather needs a batch), a ZeroRedundancyOptimizer over the same group that is not in `joinables`.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/joinable.h"

namespace ddp {

struct JoinOptions {
  bool divide_by_initial_world_size = true;
  // Participants with collectives of their own per iteration (ZeroRedundancyOptimizer), shadowed in this
  // order after the backward's. Not owned; they must outlive the Join.
  std::vector<Joinable*> joinables;
  // How the training loop zeroes gradients before a backward (Optimizer::zero_grad's set_to_none). A joined
  // rank does the same before each shadowed backward, so a parameter no rank used ends the iteration as on
  // the ranks still training (no gradient, or zeros) - what a joinable's step then sees.
  bool zero_grad_set_to_none = true;
};

class Join {
 public:
  explicit Join(DistributedDataParallel& ddp, JoinOptions options = {});
  ~Join();  // detaches from the DDP wrapper and the joinables (no communication)
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Call once this rank has no more batches. Returns when every rank has called it, with every rank's model
  // equal to the last joiner's. Collective: every rank must call it exactly once.
  void join();
  // After join(): how many of the others' iterations this rank shadowed, and whether it was (one of) the
  // last to join.
  int64_t shadowed_iterations() const { return shadowed_; }
  bool last_joiner() const { return last_joiner_; }

 private:
  DistributedDataParallel& ddp_;
  JoinOptions options_;
  int64_t shadowed_ = 0;
  bool last_joiner_ = true;
};

// For participants (joinable.h): one with collectives of its own over `pg` registers itself for its
// lifetime, so that a Join over the same group that does not shadow it is refused when it is built.
void register_join_participant(const dist::ProcessGroup& pg, const Joinable* participant);
void unregister_join_participant(const Joinable* participant);

}  // namespace ddp
