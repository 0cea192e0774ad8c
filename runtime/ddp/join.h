// join.h - uneven inputs: PyTorch's Join / DDP.join(). Ranks whose data shards differ in length would issue
// different collectives once the shortest runs out (and fail with a "collective mismatch" error). With a Join
// attached, every synchronized forward first tells the others that this rank is still training; a rank that
// ran out of batches calls join(), which shadows the others' iterations - an all-reduce of zeros for every
// gradient bucket, the used-map, the buffer broadcast - until every rank has joined, and then gives every
// rank the parameters and buffers of the last rank to join.
//
//   ddp::Join join(ddp);                  // before the first forward, on every rank
//   while (auto batch = loader.next()) { loss = f(ddp.forward(x)); backward(loss); opt.step(); ... }
//   join.join();                          // every rank, once its data is done
//
// Gradients are divided by the initial world size (joined ranks add zeros), as PyTorch does by default; with
// divide_by_initial_world_size = false by the number of ranks still training. Only synchronized iterations
// are announced: forwards inside no_sync() and forwards without grad (evaluation) communicate nothing, so
// they need no shadow. Any other collective an active rank issues between join points (a logged metric, an
// evaluation all-reduce) has no shadow: keep those to points every rank reaches (docs/ddp-step.md, Join).
#pragma once
#include <cstdint>

#include "runtime/ddp/distributed_data_parallel.h"

namespace ddp {

struct JoinOptions {
  bool divide_by_initial_world_size = true;
};

class Join {
 public:
  explicit Join(DistributedDataParallel& ddp, JoinOptions options = {});
  ~Join();  // detaches from the DDP wrapper (no communication)
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
  int64_t shadowed_ = 0;
  bool last_joiner_ = true;
};

}  // namespace ddp
