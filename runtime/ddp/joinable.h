// joinable.h - what else, besides DDP's gradient all-reduces, a rank that ran out of data must shadow under
// Join (PyTorch's Joinable): a participant whose every training iteration issues collectives of its own. A
// ZeroRedundancyOptimizer is one (its step broadcasts every rank's shard). Register it with the Join
// (JoinOptions::joinables); on a joined rank, Join calls join_shadow_iteration() once per iteration of the
// others, after the shadow of their backward, in registration order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::dist {
class ProcessGroup;
}

namespace ddp {

class Joinable {
 public:
  virtual ~Joinable() = default;
  // On a joined rank, one iteration of the ranks still training: issue exactly the collectives they issue.
  // When it runs, this rank's .grad holds the gradients the others' backward just averaged.
  virtual void join_shadow_iteration() = 0;
  // Before the shadow of the others' backward: what their forward communicates on a group of its own, which
  // they must finish before their backward starts (ZeRO-3's parameter gathers). Default: nothing.
  virtual void join_shadow_before_backward() {}
  // On a joined rank, before each activity exchange: what the others communicate on a group of their own
  // between their synchronized iterations (ZeRO-3: the gathers of no_sync micro-steps, of forwards without
  // grad); returns when they start their next synchronized forward, or when every rank has joined. Default:
  // nothing.
  virtual void join_shadow_between_iterations() {}
  // On a joined rank, before each shadowed backward: the others' zero_grad
  // (JoinOptions::zero_grad_set_to_none) on gradients this participant keeps itself (ZeRO-2/3's gradient
  // shards). Default: nothing.
  virtual void join_zero_grad(bool set_to_none) { (void)set_to_none; }
  // Registered with / detached from a Join (join.cpp): from now on every iteration of this participant is
  // Join-aware (it may exchange what a joined rank needs, e.g. ZeRO's learning rate).
  virtual void set_joined_to(bool attached) = 0;
  virtual std::string joinable_name() const = 0;
};

// Whether some Join over `pg` is attached right now (in this process). A participant with collectives of
// its own that is not registered with it checks this, so that a missing registration is a clear error on
// every rank instead of a collective timeout on some.
bool join_attached_to(const dist::ProcessGroup& pg);

// The points where ranks under Join tell each other what they do (one all-reduce of one int32 per rank on the
// main group): the start of a synchronized forward (DDP's activity exchange), and the step of an optimizer
// that is a joinable (ZeroRedundancyOptimizer, ShardedOptimizer), which a joined rank shadows once per
// synchronized backward of the others. Returns whether each rank is active (still training). When the ranks
// are not all at the same kind of point - two synchronized backwards before a step, a step without a backward
// - every rank raises the same named error instead of a collective mismatch or a timeout.
enum class JoinPoint { Forward = 0, Step = 1 };
std::vector<int32_t> join_exchange(dist::ProcessGroup& pg, JoinPoint point, bool active);

}  // namespace ddp
