// sharded_join.cpp - ZeRO-2/3 under Join (sharded_data_parallel.h, "Joinable"): the ranks still training
// announce every collective of ZeRO-3's gather group; a joined rank serves the announcements (issues the same
// gathers) between the others' synchronized iterations and before the shadow of their backward; the step's
// Join exchange. docs/sharding.md, Join.
#include <string>

#include "runtime/ddp/sharded/join_announcements.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"

namespace ddp {

using namespace zero3_join;

void ShardedDataParallel::set_joined_to(bool attached) {
  DDP_CHECK(!(attached && opt_.stage == 3 && gpg_ == pg_), "ShardedDataParallel: ZeRO-3 under Join needs ",
            "ShardOptions::gather_group (a second process group over the same ranks): a joined rank shadows ",
            "the others' gathers, which must not interleave with the shadowed reduce-scatters");
  under_join_ = attached;
  announced_iteration_ = false;
}

bool ShardedDataParallel::announcing() const {
  return under_join_ && !shadowing_ && opt_.stage == 3 && gpg_->size() > 1;
}

void ShardedDataParallel::announce(int64_t code) {
  if (!announcing()) return;
  Tensor t = Tensor::from_data<int64_t>({code}, {1});
  dist::FlightIssuer who("zero3 join announcement");
  host_allreduce(*gpg_, t, dist::ReduceOp::Max);
}

int64_t ShardedDataParallel::serve_announcements(int64_t until) {
  shadowing_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{shadowing_};
  for (;;) {
    Tensor t = Tensor::from_data<int64_t>({kNobody}, {1});
    {
      dist::FlightIssuer who("zero3 join announcement");
      host_allreduce(*gpg_, t, dist::ReduceOp::Max);
    }
    const int64_t code = t.data<int64_t>()[0];
    if (code == until || (code == kNobody && until == kNextIteration)) return code;
    // Their step where this rank expects their forward, or the other way round: the Join exchange that
    // follows on the main group (join_exchange) names the disagreement on every rank.
    if ((code == kStep && until == kNextIteration) || (code == kNextIteration && until == kStep)) return code;
    if (code == kUnitOrder) {
      agree_forward_order();
      continue;
    }
    DDP_CHECK(
        code >= kGatherBase && static_cast<size_t>((code - kGatherBase) / 2) < units_.size(), "rank ",
        pg_->rank(), ": ZeRO-3 under Join: this joined rank waited for ", announcement_name(until),
        " of the ranks still training, and they announced ", announcement_name(code),
        ". Under Join every synchronized forward must be followed by its backward (a forward abandoned by a "
        "raise between forward and backward cannot be shadowed) and every rank must call Join::join()");
    const auto u = static_cast<size_t>((code - kGatherBase) / 2);
    reshard(u);
    issue_gather(u, /*exact=*/(code - kGatherBase) % 2 == 1);
    reshard(u);  // waits for it: the others' gather had this rank's shard
  }
}

void ShardedDataParallel::join_shadow_between_iterations() {
  if (opt_.stage == 3 && gpg_->size() > 1) serve_announcements(kNextIteration);
}

void ShardedDataParallel::join_shadow_before_backward() {
  // The others' forward and backward gathers (and the order agreement after their first forward), all
  // before the shadow of their backward: they wait for each gather before issuing the reduce-scatters that
  // shadow waits for.
  if (opt_.stage == 3 && gpg_->size() > 1) serve_announcements(kBackwardDone);
}

void ShardedDataParallel::join_step_point(bool training) {
  if (!under_join_ || step_point_done_) return;
  if (opt_.stage == 3 && gpg_->size() > 1) {
    if (training)
      announce(kStep);
    else
      serve_announcements(kStep);
  }
  join_exchange(*pg_, JoinPoint::Step, training);
  step_point_done_ = true;
}

void ShardedDataParallel::join_shadow_iteration() {
  if (opt_.stage != 3) return;
  for (size_t u = 0; u < units_.size(); ++u) reshard(u);
}

}  // namespace ddp
