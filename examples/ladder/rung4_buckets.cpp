// rung4_buckets.cpp - rung 4 of the ladder (docs/ladder.md): gradients grouped into buckets of about
// --bucket-mb MiB, in reverse registration order (the order backward produces them); each gradient is copied
// into its bucket as its hook fires, and a bucket is all-reduced asynchronously once its last gradient is in.
// The idea over rung 3: rung 2's few large collectives and rung 3's overlap together - one collective per
// bucket, launched while backward still runs. Buckets are launched in index order, so every rank issues the
// same collectives in the same order even if gradients arrived in another order.
// What it costs: a copy in and out of the buckets (memory for one more copy of the gradients), and a choice
// of bucket size: larger buckets mean fewer calls but a later first launch and a longer tail after backward.
#include "examples/ladder/ladder.h"
#include "runtime/distributed/tensor_comm_buffer.h"

namespace ddp::ladder {

std::vector<std::vector<size_t>> reverse_order_buckets(const std::vector<size_t>& param_bytes,
                                                       size_t cap_bytes) {
  std::vector<std::vector<size_t>> buckets(1);
  size_t filled = 0;
  for (size_t k = param_bytes.size(); k-- > 0;) {
    buckets.back().push_back(k);
    filled += param_bytes[k];
    if (filled >= cap_bytes && k > 0) {  // full: the next parameter opens a new bucket
      buckets.emplace_back();
      filled = 0;
    }
  }
  if (buckets.back().empty()) buckets.pop_back();
  return buckets;
}

namespace {

class Buckets final : public GradientSync {
 public:
  explicit Buckets(const RungContext& ctx) : GradientSync(ctx), params_(ctx.model->parameters()) {
    broadcast_parameters(*ctx.model, *ctx.group);
    std::vector<size_t> bytes;
    for (const Tensor& p : params_) bytes.push_back(p.nbytes());
    where_.resize(params_.size());
    for (auto& members : reverse_order_buckets(bytes, static_cast<size_t>(ctx.bucket_mb * 1024 * 1024))) {
      Bucket b{members, {}, 0, nullptr};
      int64_t numel = 0;
      for (size_t i : members) {
        where_[i] = {buckets_.size(), numel};
        numel += params_[i].numel();
      }
      b.flat = Tensor::zeros({numel}, params_[members[0]].dtype(), params_[members[0]].device());
      b.pending = members.size();
      buckets_.push_back(std::move(b));
    }
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].impl()->add_post_accumulate_hook(this, [this, i](TensorImpl&) { gradient_ready(i); });
  }
  ~Buckets() override {
    for (const Tensor& p : params_) p.impl()->remove_post_accumulate_hooks(this);
    for (auto& b : buckets_)
      if (b.work) wait_quietly(*b.work);  // never leave a collective writing into a bucket we free
  }

  void finish() override {
    for (auto& b : buckets_) {
      if (!b.work)  // never launched: one of its parameters got no gradient - name it
        for (size_t i : b.members) gradient_of(params_[i], "rung 4");
      b.work->wait();  // the exposed part: what backward did not hide
      b.work.reset();
      b.pending = b.members.size();
    }
    for (size_t i = 0; i < params_.size(); ++i) params_[i].grad().copy_from(slot(i));
    next_to_launch_ = 0;
  }

 private:
  struct Bucket {
    std::vector<size_t> members;  // parameter indices, in the order backward produces them
    Tensor flat;                  // their gradients back to back
    size_t pending;               // gradients not yet copied in this backward
    std::shared_ptr<dist::Work> work;
  };
  struct Place {
    size_t bucket;
    int64_t offset;
  };

  void gradient_ready(size_t i) {
    slot(i).copy_from(gradient_of(params_[i], "rung 4"));
    --buckets_[where_[i].bucket].pending;
    // Launch every bucket that is complete, in index order: the same sequence of collectives on every rank.
    while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
      Bucket& b = buckets_[next_to_launch_++];
      b.work = ctx_.group->allreduce(comm_buffer_of(b.flat), dist::ReduceOp::Avg);
    }
  }
  Tensor slot(size_t i) const {
    const Place& at = where_[i];
    return buckets_[at.bucket]
        .flat.slice0(at.offset, at.offset + params_[i].numel())
        .view(params_[i].shape());
  }

  std::vector<Tensor> params_;
  std::vector<Place> where_;  // parameter index -> its bucket and offset
  std::vector<Bucket> buckets_;
  size_t next_to_launch_ = 0;
};

}  // namespace

std::unique_ptr<GradientSync> make_rung4(const RungContext& ctx) { return std::make_unique<Buckets>(ctx); }

}  // namespace ddp::ladder

#ifndef LADDER_NO_MAIN  // the tests link the rungs without their main()
int main(int argc, char** argv) {
  return ddp::ladder::rung_main(argc, argv, "ladder_rung4_buckets",
                                "buckets of about --bucket-mb MiB in reverse registration order, each "
                                "all-reduced asynchronously when its last gradient is ready.",
                                ddp::ladder::make_rung4);
}
#endif
